// Package errs is the error the engine packages return: a code of
// trellistype's closed set, a message and the cause, which the public
// package turns into *trellis.Error.
package errs

import (
	"errors"
	"fmt"

	"github.com/trellis-pg/trellis/trellistype"
)

// Error is an engine error with a code.
type Error struct {
	Code trellistype.Code
	Msg  string
	Err  error // the cause, if any
}

func (e *Error) Error() string {
	if e.Err != nil && e.Msg == "" {
		return e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an error with code and a formatted message.
func New(code trellistype.Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an error with code whose message is the formatted text
// followed by the cause's.
func Wrap(code trellistype.Code, err error, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...) + ": " + err.Error(), Err: err}
}

// CodeOf returns the code of the first *Error in err's chain, or "" if none.
func CodeOf(err error) trellistype.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
