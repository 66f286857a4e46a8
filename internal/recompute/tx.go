package recompute

import (
	"context"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/pgerr"
)

// Savepoint runs fn in a savepoint of tx (a pgx nested transaction): what
// it did stays when it succeeds and is rolled back when it fails. fn's
// error is returned.
func Savepoint(ctx context.Context, tx pgx.Tx, fn func() error) error {
	return pgx.BeginFunc(ctx, tx, func(pgx.Tx) error { return fn() })
}

// Undone runs fn in a savepoint that is always rolled back: only whether
// its statements succeed remains. fn's error is returned.
func Undone(ctx context.Context, tx pgx.Tx, fn func() error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	ferr := fn()
	if err := sp.Rollback(ctx); err != nil {
		return err
	}
	return ferr
}

// RowError reports whether err is one a row can explain: bad data, a
// constraint, a function that raised. Anything else (a lock timeout, a
// missing object, a lost connection) is the page's, not a row's.
func RowError(err error) bool {
	// The same classes as the catalog's apply function (migration 0001).
	return pgerr.InClass(pgerr.Code(err), pgerrcode.CardinalityViolation, pgerrcode.DataException,
		pgerrcode.IntegrityConstraintViolation, pgerrcode.SQLRoutineException, pgerrcode.ExternalRoutineException,
		pgerrcode.ExternalRoutineInvocationException, pgerrcode.WithCheckOptionViolation, pgerrcode.PLpgSQLError) ||
		pgerr.Is(err, pgerrcode.ProgramLimitExceeded)
}

// constraintState reports whether a SQLSTATE is an integrity constraint
// violation: the write's fault, never a column expression's.
func constraintState(state string) bool {
	return pgerr.InClass(state, pgerrcode.IntegrityConstraintViolation)
}
