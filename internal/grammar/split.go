package grammar

import "strings"

// FileStatement is one statement of a statements file (Split).
type FileStatement struct {
	// Text runs from the statement's first line with content through its
	// last, whole lines (so positions within it are columns of the file),
	// without the trailing ';' that ended it.
	Text string
	// Line is the 1-based line of the file the statement starts on.
	Line int
}

// FirstLine is the statement's first line, for messages.
func (s FileStatement) FirstLine() string {
	first, _, _ := strings.Cut(s.Text, "\n")
	return strings.TrimSpace(first)
}

// quote is what the scanner is inside of.
type quote int

const (
	inNothing quote = iota
	inString        // '...'
	inEString       // E'...' (backslash escapes)
	inIdent         // "..."
	inDollar        // $tag$...$tag$
	inComment       // /* ... */ (nested)
)

// Split splits a statements file (the format of trellis apply -f and
// Client.Sync) into statements. A statement
// ends at a line that is blank, or at a ';' that is the last thing on its
// line (one such ';' is removed; a line of only ';' is the usual form).
// Lines that begin with "--" are comments: they never start a statement
// and are dropped at its end. The text is scanned the way PostgreSQL
// scans it, so blank lines, ';' and "--" inside string literals, quoted
// identifiers, dollar quotes and block comments split nothing. A ';' in
// the middle of a line is left in place, for the parser to refuse.
func Split(src string) []FileStatement {
	var (
		out     []FileStatement
		lines   []string // of the open statement
		last    = -1     // index in lines of its last line with content
		start   int      // file line of its first line
		state   = inNothing
		depth   int    // block comment nesting
		dollar  string // the open dollar quote's delimiter
		lineNum int
	)
	flush := func() {
		if last >= 0 {
			out = append(out, FileStatement{
				Text: strings.TrimRight(strings.Join(lines[:last+1], "\n"), " \t\r\n"),
				Line: start,
			})
		}
		lines, last = nil, -1
	}
	for line := range strings.SplitSeq(src, "\n") {
		lineNum++
		line = strings.TrimSuffix(line, "\r")
		if state == inNothing {
			t := strings.TrimSpace(line)
			if t == "" {
				flush()
				continue
			}
			if strings.HasPrefix(t, "--") {
				if last >= 0 {
					lines = append(lines, line)
				}
				continue
			}
		}
		// A line that begins inside a literal or identifier is content.
		content := state != inNothing && state != inComment
		semi := -1 // byte offset of a ';' that is the last significant thing so far
		for i := 0; i < len(line); i++ {
			c := line[i]
			switch state {
			case inString, inEString, inIdent:
				closer := byte('\'')
				if state == inIdent {
					closer = '"'
				}
				switch {
				case state == inEString && c == '\\':
					i++
				case c == closer && i+1 < len(line) && line[i+1] == closer:
					i++
				case c == closer:
					state = inNothing
				}
				continue
			case inDollar:
				if strings.HasPrefix(line[i:], dollar) {
					i += len(dollar) - 1
					state = inNothing
				}
				continue
			case inComment:
				switch {
				case strings.HasPrefix(line[i:], "/*"):
					depth++
					i++
				case strings.HasPrefix(line[i:], "*/"):
					depth--
					i++
					if depth == 0 {
						state = inNothing
					}
				}
				continue
			}
			switch {
			case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
				continue
			case strings.HasPrefix(line[i:], "--"):
				i = len(line) // the rest of the line is a comment
				continue
			case strings.HasPrefix(line[i:], "/*"):
				state, depth = inComment, 1
				i++
				continue
			}
			// Significant: it ends any ';' seen before it.
			if semi >= 0 {
				content, semi = true, -1
			}
			switch {
			case c == ';':
				semi = i
				continue
			case c == '\'':
				state = inString
				if i > 0 && (line[i-1] == 'E' || line[i-1] == 'e') && (i < 2 || !isIdentByte(line[i-2])) {
					state = inEString
				}
			case c == '"':
				state = inIdent
			case c == '$' && (i == 0 || !isIdentByte(line[i-1])):
				if d, ok := dollarDelimiter(line[i:]); ok {
					state, dollar = inDollar, d
					i += len(d) - 1
				}
			}
			content = true
		}
		if semi >= 0 {
			line = line[:semi] + line[semi+1:]
		}
		if content {
			if last < 0 {
				lines, start = nil, lineNum
			}
			lines = append(lines, line)
			last = len(lines) - 1
		} else if last >= 0 {
			lines = append(lines, line)
		}
		if semi >= 0 {
			flush()
		}
	}
	flush()
	return out
}

// dollarDelimiter reads "$tag$" (tag empty or an identifier) at the start of s.
func dollarDelimiter(s string) (string, bool) {
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '$':
			return s[:i+1], true
		case c >= '0' && c <= '9':
			if i == 1 {
				return "", false // $1 is a parameter
			}
		case !isIdentByte(c):
			return "", false
		}
	}
	return "", false
}

// isIdentByte tells whether c can be part of an unquoted identifier (bytes
// of multi-byte characters included).
func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80
}
