package cli

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// unsafeRune reports whether r could steer a terminal or forge output
// when data prints it: control characters (C0 but newline and tab, DEL,
// C1), and the marks that reorder text (bidirectional overrides).
func unsafeRune(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
		return true
	}
	return r == utf8.RuneError || !unicode.IsPrint(r) && !unicode.IsSpace(r)
}

// escapeRune is r as Go would write it in a string literal.
func escapeRune(r rune) string {
	switch r {
	case '\n':
		return `\n`
	case '\t':
		return `\t`
	case '\r':
		return `\r`
	}
	if r < 0x100 {
		return fmt.Sprintf(`\x%02x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// printable is a value from the data (a key, an error) as it may be
// printed on a line of text: every unsafe rune, and newlines and tabs
// too, escaped; a value without them is returned as it is.
func printable(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == '\n' || r == '\t' || unsafeRune(r) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == '\n' || r == '\t' || unsafeRune(r) {
			b.WriteString(escapeRune(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// safeWriter escapes every unsafe rune written through it (newlines and
// tabs pass: the output's own layout uses them), so nothing the data holds
// reaches the terminal as a control sequence.
type safeWriter struct{ w io.Writer }

func (s safeWriter) Write(p []byte) (int, error) {
	if !strings.ContainsFunc(string(p), unsafeRune) {
		return s.w.Write(p)
	}
	var b strings.Builder
	for _, r := range string(p) {
		if unsafeRune(r) {
			b.WriteString(escapeRune(r))
			continue
		}
		b.WriteRune(r)
	}
	if _, err := io.WriteString(s.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}
