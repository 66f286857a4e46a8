// Package errs is the error vocabulary the engine packages share: a closed
// set of codes that the public package turns into *trellis.Error.
package errs

import (
	"errors"
	"fmt"
)

// Code is one of a closed set of error codes.
type Code string

// The codes, mirrored by the public package.
const (
	Parse       Code = "parse"
	Validation  Code = "validation"
	NotFound    Code = "not_found"
	Conflict    Code = "conflict"
	Timeout     Code = "timeout"
	Unavailable Code = "unavailable"
	Internal    Code = "internal"
)

// Error is an engine error with a code.
type Error struct {
	Code Code
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
func New(code Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an error with code whose message is the formatted text
// followed by the cause's.
func Wrap(code Code, err error, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...) + ": " + err.Error(), Err: err}
}

// CodeOf returns the code of the first *Error in err's chain, or "" if none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
