package recompute

import (
	"context"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/pgerr"
)

// Under runs fn, statements over t's keys, with the search_path the key
// types' operators need (plan.Spec.OpSchemas after pg_catalog), and puts
// the path back after it. With none it only runs fn.
func Under(ctx context.Context, tx pgx.Tx, t *catalog.Transform, fn func() error) error {
	if len(t.Spec.OpSchemas) == 0 {
		return fn()
	}
	var was string
	if err := tx.QueryRow(ctx, sqlSearchPath).Scan(&was); err != nil {
		return err
	}
	if err := SetPathFor(ctx, tx, t); err != nil {
		return err
	}
	ferr := fn()
	_, err := tx.Exec(ctx, sqlSetSearchPath, was)
	if ferr != nil {
		return ferr
	}
	return err
}

// SetPathFor sets, for the rest of tx, the search_path statements over t's
// keys need (see Under); a transaction that runs only those calls it once.
func SetPathFor(ctx context.Context, tx pgx.Tx, t *catalog.Transform) error {
	if len(t.Spec.OpSchemas) == 0 {
		return nil
	}
	parts := []string{"pg_catalog"}
	for _, s := range t.Spec.OpSchemas {
		parts = append(parts, ident.Quote(s))
	}
	_, err := tx.Exec(ctx, sqlSetSearchPath, strings.Join(append(parts, "pg_temp"), ", "))
	return err
}

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
