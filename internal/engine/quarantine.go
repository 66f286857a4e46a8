package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/internal/recompute"
	"github.com/trellis-pg/trellis/trellistype"
)

// heldKeys reads a transform's held keys; nil when it holds none.
func (e *Engine) heldKeys(ctx context.Context, q catalog.Querier, id int) (*trellistype.HeldKeys, error) {
	var h trellistype.HeldKeys
	var oldest *time.Time
	if err := q.QueryRow(ctx, e.Cat.SQL(sqlHeldKeys), id).Scan(&h.Count, &oldest); err != nil {
		return nil, err
	}
	if h.Count == 0 || oldest == nil {
		return nil, nil
	}
	h.OldestPoisonedAt = *oldest
	return &h, nil
}

// readTx runs fn in a read-only repeatable-read transaction, so that the
// parts of one answer agree.
func (e *Engine) readTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, e.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// Quarantined lists every paused or quarantined column, every paused
// transform and every transform holding keys, by address.
func (e *Engine) Quarantined(ctx context.Context) ([]trellistype.QuarantineEntry, error) {
	var out []trellistype.QuarantineEntry
	err := e.readTx(ctx, func(tx pgx.Tx) error {
		ts, _, err := e.Cat.Transforms(ctx, tx)
		if err != nil {
			return err
		}
		for _, t := range ts {
			entries, err := e.entries(ctx, tx, t, "", true)
			if err != nil {
				return err
			}
			out = append(out, entries...)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b trellistype.QuarantineEntry) int { return strings.Compare(a.Target, b.Target) })
	return out, err
}

// QuarantineStatus reports one address: a transform or one of its columns.
func (e *Engine) QuarantineStatus(ctx context.Context, address string) (trellistype.QuarantineEntry, error) {
	var out trellistype.QuarantineEntry
	err := e.readTx(ctx, func(tx pgx.Tx) error {
		t, col, err := e.address(ctx, tx, address)
		if err != nil {
			return err
		}
		entries, err := e.entries(ctx, tx, t, col, false)
		if err != nil {
			return err
		}
		out = entries[0]
		return nil
	})
	return out, err
}

// address resolves a quarantine address ("t", "schema.t" or "t.col").
func (e *Engine) address(ctx context.Context, tx pgx.Tx, address string) (*catalog.Transform, string, error) {
	// An address is what RESUME TRANSFORM takes.
	st, err := grammar.Parse("RESUME TRANSFORM " + address)
	r, ok := st.(*grammar.Resume)
	if err != nil || !ok || strings.ContainsAny(address, ";") {
		return nil, "", errs.New(trellistype.CodeValidation, "%q is not an address (a transform, or transform.column)", address)
	}
	t, col, err := e.resolveAddress(ctx, tx, r.Address, false)
	if err != nil {
		return nil, "", err
	}
	if col != "" && !slices.ContainsFunc(t.Spec.Columns, func(c plan.Column) bool { return c.Name == col }) {
		return nil, "", errs.New(trellistype.CodeNotFound, "%s has no column %s", t.Target, col)
	}
	return t, col, nil
}

// entries are a transform's quarantine entries: with col, that column's
// (live or not); with onlyQuarantined, the paused columns and the
// transform's own when it is paused or holds keys; otherwise the
// transform's own.
func (e *Engine) entries(ctx context.Context, tx pgx.Tx, t *catalog.Transform, col string, onlyQuarantined bool) ([]trellistype.QuarantineEntry, error) {
	var out []trellistype.QuarantineEntry
	if col != "" || onlyQuarantined {
		quar := map[string]trellistype.QuarantineEntry{}
		rows, err := tx.Query(ctx, e.Cat.SQL(sqlQuarantinedColumns), t.ID)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var q trellistype.QuarantineEntry
			var name string
			var state *string
			if err := rows.Scan(&name, &q.Error, &state, &q.Since, &q.Rows); err != nil {
				rows.Close()
				return nil, err
			}
			if state != nil {
				q.SQLState = *state
			}
			quar[name] = q
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for _, c := range t.Spec.Columns {
			if col != "" && c.Name != col || col == "" && !c.Paused {
				continue
			}
			q := quar[c.Name]
			q.Target = t.Target.Name + "." + c.Name
			q.State = trellistype.StateLive
			if c.Paused {
				q.State = trellistype.StatePaused
				q.Reason = "paused by PAUSE TRANSFORM " + q.Target
				if q.Error != "" {
					q.Reason = fmt.Sprintf("quarantined: its expression failed on %d row(s) (%s); the other columns keep applying. Fix those rows (sample %s to list them), then RESUME TRANSFORM %s", q.Rows, q.Error, q.Target, q.Target)
				}
			} else {
				q = trellistype.QuarantineEntry{Target: q.Target, State: trellistype.StateLive}
			}
			out = append(out, q)
		}
		if col != "" {
			return out, nil
		}
	}
	held, err := e.heldKeys(ctx, tx, t.ID)
	if err != nil {
		return nil, err
	}
	if onlyQuarantined && held == nil && t.State != trellistype.StatePaused {
		return out, nil
	}
	q := trellistype.QuarantineEntry{Target: t.Target.Name, State: t.State}
	switch {
	case t.State == trellistype.StatePaused:
		q.Since, q.Reason, q.Error = t.StateSince, t.PausedReason, t.FailureError
	case held != nil:
		q.Since = held.OldestPoisonedAt
		q.Reason = fmt.Sprintf("holds %d poisoned key(s) whose changes are not applied (sample %s to list them); fix their rows, then release each key or RESUME TRANSFORM %s", held.Count, t.Target.Name, t.Target.Name)
	}
	if held != nil {
		q.Rows, q.HeldKeys = held.Count, held
		if q.Error == "" {
			if err := tx.QueryRow(ctx, e.Cat.SQL(sqlOldestHeldError), t.ID).Scan(&q.Error, &q.SQLState); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return nil, err
			}
		}
	}
	return append(out, q), nil
}

// SampleQuarantined pages the rows quarantined under an address: a
// column's failed rows, or a transform's held keys, by (src_table, key).
func (e *Engine) SampleQuarantined(ctx context.Context, address string, limit int, after *trellistype.Cursor) (trellistype.SamplePage, error) {
	var page trellistype.SamplePage
	err := e.readTx(ctx, func(tx pgx.Tx) error {
		t, col, err := e.address(ctx, tx, address)
		if err != nil {
			return err
		}
		var aTable, aKey *string
		if after != nil {
			table, key := after.After()
			aTable, aKey = &table, &key
		}
		rows, err := tx.Query(ctx, e.Cat.SQL(sqlSample), t.ID, col, aTable, aKey, limit+1)
		if err != nil {
			return err
		}
		page.Samples, err = pgx.CollectRows(rows, pgx.RowToStructByPos[trellistype.PoisonSample])
		if err != nil {
			return err
		}
		if len(page.Samples) > limit {
			page.Samples = page.Samples[:limit]
			last := page.Samples[limit-1]
			page.NextCursor = trellistype.NewCursor(last.SrcTable, last.Key)
		}
		return nil
	})
	return page, err
}

// PoisonedSince lists the keys poisoned after since, oldest first.
func (e *Engine) PoisonedSince(ctx context.Context, since time.Time) ([]trellistype.PoisonEntry, error) {
	rows, err := e.Pool.Query(ctx, e.Cat.SQL(sqlPoisonedSince), since)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[trellistype.PoisonEntry])
}

// ReleaseKey releases one key a transform holds and re-derives it from its
// current row; it is poisoned again if the cause remains. The wait for the
// pages in flight is bounded by 30 seconds.
func (e *Engine) ReleaseKey(ctx context.Context, transform, sourceTable, key string) error {
	return pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		if err := locks.SetTimeout(ctx, tx, 30*time.Second); err != nil {
			return err
		}
		if err := locks.DDLShared(ctx, tx, e.Cat.Schema); err != nil {
			return lockTimeout(err, "waiting for a definition change")
		}
		t, err := e.Lookup(ctx, tx, transform, false)
		if err != nil {
			return err
		}
		if t == nil {
			return errs.New(trellistype.CodeNotFound, "no transform writes %s", transform)
		}
		rows, err := tx.Query(ctx, e.Cat.SQL(sqlReleaseKey), t.ID, sourceTable, key)
		if err != nil {
			return err
		}
		held, err := pgx.CollectRows(rows, scanHeld)
		if err != nil {
			return err
		}
		if len(held) == 0 {
			return errs.New(trellistype.CodeNotFound, "%s holds no key %s of %s", t.Target, key, sourceTable)
		}
		if err := e.release(ctx, tx, t, held); err != nil {
			return lockTimeout(err, "waiting for the drain pages in flight on "+t.Target.String())
		}
		return e.Cat.BumpGen(ctx, tx)
	})
}

// releaseAll releases every key a transform holds (RESUME TRANSFORM t).
func (e *Engine) releaseAll(ctx context.Context, tx pgx.Tx, t *catalog.Transform) (int, error) {
	rows, err := tx.Query(ctx, e.Cat.SQL(sqlReleaseAll), t.ID)
	if err != nil {
		return 0, err
	}
	keys, err := pgx.CollectRows(rows, scanHeld)
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	if t.State == trellistype.StatePaused {
		return len(keys), nil // the rebuild that resumes it re-derives them
	}
	if len(keys) > releaseInline {
		// Too many to re-derive one by one within a call: the target is
		// rebuilt from its source instead, in the background, and reports
		// backfilling until then.
		if _, err := tx.Exec(ctx, e.Cat.SQL(sqlSetRebuild), t.ID, trellistype.StateBackfilling); err != nil {
			return 0, err
		}
		return len(keys), e.notifyStaging(ctx, tx)
	}
	if err := e.release(ctx, tx, t, keys); err != nil {
		return 0, err
	}
	return len(keys), nil
}

// heldKey is a key a transform held, as its release deletes it.
type heldKey struct {
	key       []*string
	sourceRow bool
	table     string
}

func scanHeld(r pgx.CollectableRow) (heldKey, error) {
	var h heldKey
	err := r.Scan(&h.key, &h.sourceRow, &h.table)
	return h, err
}

// release re-derives released keys: a target key at once, from its current
// rows; a source row by staging a change of it, which the drain applies to
// every transform reading the table (poisoning it again if it still fails).
func (e *Engine) release(ctx context.Context, tx pgx.Tx, t *catalog.Transform, held []heldKey) error {
	var keys [][]*string
	for _, h := range held {
		if !h.sourceRow {
			keys = append(keys, h.key)
			continue
		}
		captured, err := e.Ledger.Restage(ctx, tx, h.table, h.key)
		if err != nil {
			return fmt.Errorf("staging %s of %s again: %w", recompute.RenderKey(h.key), h.table, err)
		}
		if !captured {
			return errs.New(trellistype.CodeNotFound, "%s is no longer captured: its row %s cannot be staged again", h.table, recompute.RenderKey(h.key))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	return e.Recompute.Release(ctx, tx, t, keys)
}

// releaseInline is the most held keys RESUME re-derives itself; past it,
// the transform is rebuilt.
const releaseInline = 5000

// lockTimeout turns a lock timeout into CodeTimeout.
func lockTimeout(err error, what string) error {
	if pgerr.Is(err, pgerrcode.LockNotAvailable) {
		return errs.New(trellistype.CodeTimeout, "%s took longer than the lock timeout; nothing changed, try again", what)
	}
	return err
}
