package funcwatch

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
)

// Cast is a cast between a type Trellis renders as text (a key or
// captured column's, its array element's or its domain's base type) and
// text, done by a function that is neither pg_catalog's nor an
// extension's: its owner's code would run inside Trellis's statements,
// with Trellis's rights (decision 0034).
type Cast struct {
	Cast     string // (source AS target)
	Function string // the function's signature
	Owner    string // the function's owner
}

// Fix says what the cast is and how to remove it.
func (c Cast) Fix() string {
	return fmt.Sprintf("cast %s with function %s, owned by %s, would run inside Trellis's statements (they render keys and captured values as text and back): drop it (DROP CAST %s)",
		c.Cast, c.Function, c.Owner, c.Cast)
}

// UserCasts returns the casts of types (format_type names, qualified
// outside pg_catalog) that Trellis must not run.
func UserCasts(ctx context.Context, q catalog.Querier, types []string) ([]Cast, error) {
	if len(types) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, sqlUserCasts, types)
	if err != nil {
		return nil, fmt.Errorf("reading the casts of the definition's types: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Cast])
}

// CastReaders returns, for every transform that is not paused and reads a
// source whose key or captured column types have a cast UserCasts would
// report, the reason to pause it.
func CastReaders(ctx context.Context, q catalog.Querier, cat *catalog.Catalog) (map[int]string, error) {
	rows, err := q.Query(ctx, cat.SQL(sqlCastReaders))
	if err != nil {
		return nil, fmt.Errorf("checking the casts of source types: %w", err)
	}
	out := map[int]string{}
	for rows.Next() {
		var id int
		var c Cast
		if err := rows.Scan(&id, &c.Cast, &c.Function, &c.Owner); err != nil {
			rows.Close()
			return nil, err
		}
		if _, ok := out[id]; !ok {
			out[id] = c.Fix() + ", then RESUME TRANSFORM"
		}
	}
	rows.Close()
	return out, rows.Err()
}

// PauseCastReaders pauses the transforms CastReaders finds, each with its
// reason, and returns their ids. The caller's transaction should hold the
// instance's DDL lock. RESUME re-derives the target (nothing is lost); it
// pauses again while the cast stays.
func PauseCastReaders(ctx context.Context, tx pgx.Tx, cat *catalog.Catalog) (map[int]string, error) {
	found, err := CastReaders(ctx, tx, cat)
	if err != nil {
		return nil, err
	}
	for id, reason := range found {
		if _, err := tx.Exec(ctx, cat.SQL(sqlPause), id, reason); err != nil {
			return nil, fmt.Errorf("pausing a transform over a planted cast: %w", err)
		}
	}
	return found, nil
}
