// Package pgerr reads PostgreSQL errors: their SQLSTATE codes and classes,
// named by github.com/jackc/pgerrcode instead of string literals.
package pgerr

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Code returns the SQLSTATE of the PostgreSQL error in err's chain, "" when
// there is none.
func Code(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Is reports whether err's chain holds a PostgreSQL error with one of codes
// (pgerrcode constants).
func Is(err error, codes ...string) bool {
	c := Code(err)
	if c == "" {
		return false
	}
	for _, want := range codes {
		if c == want {
			return true
		}
	}
	return false
}

// InClass reports whether SQLSTATE code belongs to the class of one of
// classes, each named by its class code (pgerrcode.DataException for class
// 22, and so on). Any code of the class matches, including ones a user's
// function raises and pgerrcode does not list.
func InClass(code string, classes ...string) bool {
	if len(code) != 5 {
		return false
	}
	for _, class := range classes {
		if code[:2] == class[:2] {
			return true
		}
	}
	return false
}
