package grammar

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	pg "github.com/pganalyze/pg_query_go/v6"
	pg_query "github.com/wasilibs/go-pgquery"
	"github.com/wasilibs/go-pgquery/parser"
)

// The wrappers below are the only calls into PostgreSQL's parser. go-pgquery
// compiles its WebAssembly module on first use (nothing happens at package
// init) and keeps a pool of instances, so concurrent calls are safe. Each
// instance it adds to the pool compiles the module again (well over a
// second of CPU), so the number of calls in flight is bounded: a burst of
// concurrent Parse calls then shares a few instances instead of compiling
// one each. A failure inside the module surfaces as a panic; it is turned
// into an error so that Parse never panics.

// pgSlots is the lazily made semaphore bounding calls into the parser.
var pgSlots = sync.OnceValue(func() chan struct{} {
	return make(chan struct{}, min(runtime.GOMAXPROCS(0), 4))
})

func acquire() func() {
	slots := pgSlots()
	slots <- struct{}{}
	return func() { <-slots }
}

func pgScan(text string) (res *pg.ScanResult, err error) {
	defer acquire()()
	defer recoverInto(&err)
	return pg_query.Scan(text)
}

func pgParse(text string) (res *pg.ParseResult, err error) {
	defer acquire()()
	defer recoverInto(&err)
	return pg_query.Parse(text)
}

func pgDeparse(tree *pg.ParseResult) (out string, err error) {
	defer acquire()()
	defer recoverInto(&err)
	return pg_query.Deparse(tree)
}

func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("PostgreSQL's parser failed: %v", r)
	}
}

// pgError turns an error of the scanner or parser, which ran on prefix
// followed by the text's bytes [from, to), into an *Error positioned in the
// statement text. what names the part for the message.
func (s *source) pgError(err error, from, to int, prefix string, what string) *Error {
	var pe *parser.Error
	if !errors.As(err, &pe) {
		return s.errAtByte(Invalid, from, what+": "+err.Error(), "")
	}
	// Drop the position PostgreSQL appends; Error.Error adds its own.
	msg := pe.Message
	if i := strings.Index(msg, ` at or near "`); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimSuffix(msg, " at end of input")
	if msg == "" {
		msg = "syntax error"
	}
	msg += " in " + what
	part := s.text[from:to]
	prefixChars := len([]rune(prefix))
	chars := pe.Cursorpos - 1 - prefixChars // 0-based character offset into part
	off := from
	switch {
	case pe.Cursorpos <= 0 || chars < 0:
		// no position, or inside the prefix: point at the part itself
	case chars >= len([]rune(part)):
		off = to // the end of the part: the token after it
	default:
		off = from + byteOffsetOfChar(part, chars)
	}
	if strings.Contains(pe.Message, "memory exhausted") || strings.Contains(pe.Message, "stack depth") {
		msg += " (the expression is nested too deeply)"
	}
	return s.errAtByte(Syntax, off, msg, "")
}
