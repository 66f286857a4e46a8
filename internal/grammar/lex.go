package grammar

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN-1: longer identifiers
// would be truncated silently by the server, so they are refused.
const maxIdentifierBytes = 63

// endOfInput is the Token of an error found past the last token.
const endOfInput = "end of input"

// token is one significant token of the statement (comments are dropped).
type token struct {
	kind  pg.Token
	kw    pg.KeywordKind
	start int    // byte offset of the first byte in the statement text
	end   int    // byte offset just past the last byte
	text  string // the token as written
	word  string // lower-cased text of a keyword or unquoted identifier, "" otherwise
}

// source is a tokenised statement plus what is needed to report positions.
type source struct {
	text string
	toks []token
	// n is the number of tokens of the statement proper: toks[n], when
	// present, is the one trailing ';'.
	n int
}

// lex tokenises text with PostgreSQL's scanner and applies the checks that
// concern the token stream as a whole: valid UTF-8, no NUL outside quoted
// identifiers, no ';' except one at the very end, identifiers that
// PostgreSQL would neither truncate nor choke on.
func lex(text string) (*source, *Error) {
	src := &source{text: text}
	if i := invalidUTF8(text); i >= 0 {
		return nil, src.errAtByte(Syntax, i, "the statement is not valid UTF-8", `\x`+strconv.FormatUint(uint64(text[i]), 16))
	}
	// PostgreSQL's scanner reads a C string, so a NUL byte would end the
	// statement early. Scan a copy with NULs replaced by another control
	// character of the same width; whatever contains one is refused below.
	scanned := text
	nul := strings.IndexByte(text, 0)
	if nul >= 0 {
		scanned = strings.ReplaceAll(text, "\x00", "\x01")
	}
	res, err := pgScan(scanned)
	if err != nil {
		return nil, src.pgError(err, 0, len(text), "", "the statement")
	}
	for _, t := range res.GetTokens() {
		start, end := int(t.GetStart()), int(t.GetEnd())
		if start < 0 || end > len(text) || start > end {
			return nil, src.errAtByte(Syntax, 0, "PostgreSQL's scanner returned an unexpected token", "")
		}
		if t.GetToken() == pg.Token_SQL_COMMENT || t.GetToken() == pg.Token_C_COMMENT {
			continue
		}
		tok := token{kind: t.GetToken(), kw: t.GetKeywordKind(), start: start, end: end, text: text[start:end]}
		switch {
		case tok.kw != pg.KeywordKind_NO_KEYWORD:
			tok.word = strings.ToLower(tok.text)
		case tok.kind == pg.Token_IDENT && !strings.HasPrefix(tok.text, `"`):
			tok.word = asciiLower(tok.text)
		}
		src.toks = append(src.toks, tok)
	}
	src.n = len(src.toks)

	if nul >= 0 {
		for i := nul; i >= 0 && i < len(text); {
			ti := src.tokenAt(i)
			if ti >= len(src.toks) || src.toks[ti].start > i || !src.toks[ti].quotedIdent() {
				return nil, src.errAtByte(Syntax, i, "NUL characters are not allowed in a statement", `\x00`)
			}
			next := strings.IndexByte(text[i+1:], 0)
			if next < 0 {
				break
			}
			i += 1 + next
		}
	}

	for i, t := range src.toks {
		if t.kind != pg.Token_ASCII_59 {
			continue
		}
		if i != len(src.toks)-1 {
			return nil, src.errAt(Syntax, i, "only one statement is allowed: ';' may only end the statement")
		}
		src.n = i
	}

	for i := 0; i < src.n; i++ {
		t := src.toks[i]
		if t.kind != pg.Token_IDENT && t.kind != pg.Token_UIDENT {
			continue
		}
		name, _, e := src.identAt(i)
		if e != nil {
			return nil, e
		}
		if e := src.checkIdent(i, name); e != nil {
			return nil, e
		}
	}
	return src, nil
}

// quotedIdent tells whether the token is a "quoted" or U&"quoted" identifier.
func (t token) quotedIdent() bool {
	return (t.kind == pg.Token_IDENT && strings.HasPrefix(t.text, `"`)) || t.kind == pg.Token_UIDENT
}

// checkIdent refuses identifiers PostgreSQL would truncate and identifiers
// with characters that have no business in a name.
func (s *source) checkIdent(i int, name string) *Error {
	if len(name) > maxIdentifierBytes {
		return s.errAt(Invalid, i, "identifier is longer than 63 bytes (PostgreSQL would truncate it)")
	}
	for _, r := range name {
		switch {
		case r == ';':
			return s.errAt(Invalid, i, "identifiers may not contain ';'")
		case r == 0:
			return s.errAt(Invalid, i, "identifiers may not contain NUL characters")
		case unicode.IsControl(r):
			return s.errAt(Invalid, i, "identifiers may not contain control characters")
		}
	}
	return nil
}

// identAt normalises the identifier token at i the way PostgreSQL does and
// returns it with the index of the token after it (a U&"..." identifier
// may be followed by UESCAPE 'c'). Keywords are returned lower-cased; the
// caller decides whether a keyword may serve as a name there.
func (s *source) identAt(i int) (string, int, *Error) {
	t := s.toks[i]
	switch {
	case t.kind == pg.Token_IDENT && strings.HasPrefix(t.text, `"`):
		if len(t.text) < 2 || !strings.HasSuffix(t.text, `"`) {
			return "", i + 1, s.errAt(Syntax, i, "malformed quoted identifier")
		}
		return strings.ReplaceAll(t.text[1:len(t.text)-1], `""`, `"`), i + 1, nil
	case t.kind == pg.Token_UIDENT:
		esc := '\\'
		next := i + 1
		if next+1 < s.n && s.toks[next].kind == pg.Token_UESCAPE && s.toks[next+1].kind == pg.Token_SCONST {
			lit := s.toks[next+1].text
			r, size := utf8.DecodeRuneInString(lit[min(1, len(lit)):])
			if len(lit) != size+2 || !strings.HasPrefix(lit, "'") || !strings.HasSuffix(lit, "'") || !validUEscape(r) {
				return "", next + 2, s.errAt(Syntax, next+1, "invalid UESCAPE character")
			}
			esc = r
			next += 2
		}
		body := t.text
		if len(body) < 4 || !strings.HasSuffix(body, `"`) {
			return "", next, s.errAt(Syntax, i, "malformed Unicode identifier")
		}
		body = strings.ReplaceAll(body[3:len(body)-1], `""`, `"`)
		name, ok := decodeUnicodeEscapes(body, esc)
		if !ok {
			return "", next, s.errAt(Syntax, i, "invalid Unicode escape in identifier")
		}
		return name, next, nil
	case t.kind == pg.Token_IDENT:
		return t.word, i + 1, nil
	case t.kw != pg.KeywordKind_NO_KEYWORD:
		return t.word, i + 1, nil
	}
	return "", i + 1, s.errAt(Syntax, i, "expected a name")
}

// validUEscape mirrors PostgreSQL's check_uescapechar.
func validUEscape(r rune) bool {
	if r == utf8.RuneError || isHex(r) || r == '+' || r == '\'' || r == '"' || unicode.IsSpace(r) {
		return false
	}
	return true
}

func isHex(r rune) bool {
	return (r >= '0' && r <= '9') || (r >= 'a' && r <= 'f') || (r >= 'A' && r <= 'F')
}

// decodeUnicodeEscapes resolves \XXXX, \+XXXXXX and \\ (with esc in place
// of the backslash), including UTF-16 surrogate pairs, as PostgreSQL does
// for U&"..." identifiers.
func decodeUnicodeEscapes(s string, esc rune) (string, bool) {
	var b strings.Builder
	rs := []rune(s)
	hex := func(from, n int) (rune, bool) {
		if from+n > len(rs) {
			return 0, false
		}
		var v rune
		for _, r := range rs[from : from+n] {
			if !isHex(r) {
				return 0, false
			}
			d, _ := strconv.ParseUint(string(r), 16, 8)
			v = v*16 + rune(d)
		}
		return v, true
	}
	var pendingHigh rune
	for i := 0; i < len(rs); {
		r := rs[i]
		if r != esc {
			if pendingHigh != 0 {
				return "", false
			}
			b.WriteRune(r)
			i++
			continue
		}
		if i+1 < len(rs) && rs[i+1] == esc {
			if pendingHigh != 0 {
				return "", false
			}
			b.WriteRune(esc)
			i += 2
			continue
		}
		var cp rune
		var ok bool
		if i+1 < len(rs) && rs[i+1] == '+' {
			cp, ok = hex(i+2, 6)
			i += 8
		} else {
			cp, ok = hex(i+1, 4)
			i += 5
		}
		if !ok || cp == 0 || cp > unicode.MaxRune {
			return "", false
		}
		switch {
		case cp >= 0xD800 && cp <= 0xDBFF:
			if pendingHigh != 0 {
				return "", false
			}
			pendingHigh = cp
		case cp >= 0xDC00 && cp <= 0xDFFF:
			if pendingHigh == 0 {
				return "", false
			}
			b.WriteRune(0x10000 + (pendingHigh-0xD800)<<10 + (cp - 0xDC00))
			pendingHigh = 0
		default:
			if pendingHigh != 0 {
				return "", false
			}
			b.WriteRune(cp)
		}
	}
	if pendingHigh != 0 {
		return "", false
	}
	return b.String(), true
}

// asciiLower folds ASCII letters only, like PostgreSQL's downcase_identifier
// does for a multi-byte server encoding.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// invalidUTF8 returns the byte offset of the first invalid UTF-8 sequence, or -1.
func invalidUTF8(s string) int {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return -1
}

// tokenAt returns the index of the token containing byte offset off, or of
// the first token starting after it; len(toks) when there is none.
func (s *source) tokenAt(off int) int {
	for i, t := range s.toks {
		if off < t.end {
			return i
		}
	}
	return len(s.toks)
}

// lineCol converts a byte offset into a 1-based line and character column.
func (s *source) lineCol(off int) (int, int) {
	off = max(0, min(off, len(s.text)))
	line := 1 + strings.Count(s.text[:off], "\n")
	lineStart := strings.LastIndexByte(s.text[:off], '\n') + 1
	return line, 1 + utf8.RuneCountInString(s.text[lineStart:off])
}

// errAt reports an error at token i; i >= s.n means the end of the statement.
func (s *source) errAt(kind ErrorKind, i int, msg string) *Error {
	if i >= 0 && i < len(s.toks) {
		t := s.toks[i]
		line, col := s.lineCol(t.start)
		return &Error{Kind: kind, Line: line, Column: col, Token: t.text, Msg: msg}
	}
	off := 0
	if s.n > 0 {
		off = s.toks[s.n-1].end
	}
	line, col := s.lineCol(off)
	return &Error{Kind: kind, Line: line, Column: col, Token: endOfInput, Msg: msg}
}

// errAtByte reports an error at a byte offset of the text: at the token
// found there when the text was tokenised, else at the offset itself with
// tokText (or the characters found there) as the token.
func (s *source) errAtByte(kind ErrorKind, off int, msg, tokText string) *Error {
	if s.toks != nil {
		return s.errAt(kind, s.tokenAt(off), msg)
	}
	off = max(0, min(off, len(s.text)))
	line, col := s.lineCol(off)
	if tokText == "" {
		tokText = wordAt(s.text[off:])
	}
	return &Error{Kind: kind, Line: line, Column: col, Token: tokText, Msg: msg}
}

// wordAt returns the start of s up to the first white space, at most 30
// characters, or "end of input" for an empty s.
func wordAt(s string) string {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	if s == "" {
		return endOfInput
	}
	n := 0
	for i, r := range s {
		if unicode.IsSpace(r) || n == 30 {
			return s[:i]
		}
		n++
	}
	return s
}

// byteOffsetOfChar converts a 0-based character offset within s into a byte offset.
func byteOffsetOfChar(s string, chars int) int {
	if chars <= 0 {
		return 0
	}
	n := 0
	for i := range s {
		if n == chars {
			return i
		}
		n++
	}
	return len(s)
}
