package trellis

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/pgerr"
)

// ErrNotMigrated is the cause (errors.Is) of the CodeNotFound error a
// call returns when the instance's catalog does not exist in the database,
// or is behind this version of Trellis: run Client.Migrate (trellis
// migrate).
var ErrNotMigrated = catalog.ErrNotMigrated

// Error is the error every Trellis call returns: a stable Code and a message
// meant for people.
type Error struct {
	Code    Code
	Message string
	// Line and Column locate a statement error (CodeParse, and a
	// CodeValidation from the grammar's rules) in the statement text,
	// 1-based; 0 when the error has no position.
	Line, Column int
	err          error
}

func (e *Error) Error() string { return "trellis: " + e.Message }

// Unwrap returns the cause the error was made from, nil when it has none:
// errors.Is(err, context.DeadlineExceeded) and errors.As with a
// *pgconn.PgError see through a *Error. The Code and Message are what to
// branch on and show; the cause is for diagnosis, and its type is the
// driver's, not part of this package's contract.
func (e *Error) Unwrap() error { return e.err }

// CodeOf returns the Code of err if it is (or wraps) a *Error, and "" for
// nil or for any other error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newError(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

var errClosed = newError(CodeValidation, "the client is closed")

// translate turns any error from the engine or the driver into a *Error.
// It is the one place driver errors are interpreted.
func translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var te *Error
	if errors.As(err, &te) {
		return te
	}
	var ee *errs.Error
	if errors.As(err, &ee) {
		out := &Error{Code: ee.Code, Message: ee.Error(), err: err}
		var ge *grammar.Error
		if errors.As(err, &ge) {
			out.Line, out.Column = ge.Line, ge.Column
		}
		return out
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		code := CodeInternal
		switch {
		case pgerr.Is(pe, pgerrcode.QueryCanceled, pgerrcode.LockNotAvailable):
			code = CodeTimeout
		case pgerr.Is(pe, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected) ||
			pgerr.InClass(pe.Code, pgerrcode.IntegrityConstraintViolation):
			code = CodeConflict
		case pgerr.InClass(pe.Code, pgerrcode.SyntaxErrorOrAccessRuleViolation, pgerrcode.DataException):
			code = CodeValidation
		case pgerr.InClass(pe.Code, pgerrcode.ConnectionException, pgerrcode.InvalidAuthorizationSpecification, pgerrcode.OperatorIntervention) ||
			pgerr.Is(pe, pgerrcode.InvalidCatalogName, pgerrcode.TooManyConnections):
			code = CodeUnavailable
		}
		if code == CodeTimeout && ctx.Err() == nil {
			return &Error{Code: code, Message: fmt.Sprintf("%s: %s", op, pe.Message), err: err}
		}
		if code != CodeTimeout {
			return &Error{Code: code, Message: fmt.Sprintf("%s: %s (SQLSTATE %s)", op, pe.Message, pe.Code), err: err}
		}
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		cause := err
		if ce := ctx.Err(); ce != nil && !errors.Is(err, ce) {
			cause = errors.Join(ce, err) // the server's "canceling statement" names no context error
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			return &Error{Code: CodeTimeout, Message: op + ": cancelled by the caller's context", err: cause}
		}
		return &Error{Code: CodeTimeout, Message: op + ": did not finish in time; what it started was cancelled", err: cause}
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) {
		return &Error{Code: CodeUnavailable, Message: op + ": the database cannot be reached: " + err.Error(), err: err}
	}
	return &Error{Code: CodeInternal, Message: op + ": " + err.Error(), err: err}
}
