package staging

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/capture"
	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/trellistype"
)

// readsSuspect is a source that checkReads found something wrong with.
type readsSuspect struct {
	id      int
	readers []int
	refit   bool
}

// checkReads looks, in the caller's transaction (which holds the DDL
// lock), for source tables that lost a column or the primary key that
// capture or a definition relies on. Every reader that is not paused and
// reads a dropped column, or whose source lost its primary key, is paused
// with a capture failure of kind capture. It returns the sources whose
// capture needs fixing (fixCapture), and whether it paused any reader.
func (w *Worker) checkReads(ctx context.Context, tx pgx.Tx) ([]int, bool, error) {
	rows, err := tx.Query(ctx, w.Cat.SQL(sqlReadsCheck), capture.UnrecordedMark())
	if err != nil {
		return nil, false, fmt.Errorf("checking the columns sources still have: %w", err)
	}
	suspects, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (readsSuspect, error) {
		var s readsSuspect
		err := r.Scan(&s.id, &s.readers, &s.refit)
		return s, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("checking the columns sources still have: %w", err)
	}
	var fix []int
	paused := false
	done := map[int]bool{}
	for _, s := range suspects {
		if s.refit {
			fix = append(fix, s.id)
		}
		for _, id := range s.readers {
			if done[id] {
				continue
			}
			done[id] = true
			t, err := w.Cat.TransformByID(ctx, tx, id, false)
			if err != nil {
				return nil, paused, err
			}
			if t == nil || (t.State == trellistype.StatePaused && t.FailureKind != trellistype.CaptureFailureHalt) {
				continue
			}
			p, err := w.Cat.CheckReads(ctx, tx, t)
			if err != nil {
				return nil, paused, err
			}
			if p == nil {
				continue
			}
			msg := readsMessage(t, p)
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlCaptureFailure), t.ID, p.Table, p.Columns, msg); err != nil {
				return nil, paused, err
			}
			paused = true
			w.Metrics.CaptureFailures(trellistype.CaptureFailureCapture, 1)
			w.Logger.Error("a source table a transform reads lost a column or its key, or is linked by inheritance; it is paused until RESUME",
				"target", t.Target.String(), "table", p.Table, "columns", strings.Join(p.Columns, ","), "reason", msg)
		}
	}
	if paused {
		if err := w.Cat.BumpGen(ctx, tx); err != nil {
			return nil, paused, err
		}
	}
	return fix, paused, nil
}

// readsMessage says what is wrong with the columns a transform reads, and
// what to do about it.
func readsMessage(t *catalog.Transform, p *catalog.ReadsProblem) string {
	name := t.Target.Name
	switch p.Link {
	case "partition":
		return fmt.Sprintf("%s, which the definition of %s reads, is now a partition of %s: rows inserted through %s never reach its capture; "+
			"detach it (ALTER TABLE %s DETACH PARTITION %s) and RESUME TRANSFORM %s, or DROP TRANSFORM %s and define it over %s",
			p.Table, t.Target.String(), p.Other, p.Other, p.Other, p.Quoted, name, name, p.Other)
	case "inherits":
		return fmt.Sprintf("%s, which the definition of %s reads, now inherits from %s: rows updated or deleted through %s never reach its capture; "+
			"end it (ALTER TABLE %s NO INHERIT %s) and RESUME TRANSFORM %s, or DROP TRANSFORM %s and define it again",
			p.Table, t.Target.String(), p.Other, p.Other, p.Quoted, p.Other, name, name)
	case "inherited":
		return fmt.Sprintf("%s, which the definition of %s reads, is now inherited by %s: rows written to %s never reach its capture; "+
			"end it (ALTER TABLE %s NO INHERIT %s) and RESUME TRANSFORM %s, or DROP TRANSFORM %s and define it over each table",
			p.Table, t.Target.String(), p.Other, p.Other, p.Other, p.Quoted, name, name)
	}
	cols := strings.Join(p.Columns, ", ")
	if p.NoKey {
		return fmt.Sprintf("%s no longer has a primary key on (%s), which Trellis needs to know which of its rows changed: "+
			"add it back (ALTER TABLE %s ADD PRIMARY KEY (%s)) and RESUME TRANSFORM %s, or DROP TRANSFORM %s and define it again",
			p.Table, cols, p.Table, cols, name, name)
	}
	what := "column " + cols + " of " + p.Table + ", which the definition of " + t.Target.String() + " reads, was dropped"
	if len(p.Columns) > 1 {
		what = "columns " + cols + " of " + p.Table + ", which the definition of " + t.Target.String() + " reads, were dropped"
	}
	alter := ""
	if len(p.Outputs) > 0 {
		alter = fmt.Sprintf(", or stop reading it (ALTER TRANSFORM %s DROP COLUMN %s)", name, strings.Join(p.Outputs, "; ALTER TRANSFORM "+name+" DROP COLUMN "))
	}
	return fmt.Sprintf("%s: add it back (ALTER TABLE %s ADD COLUMN ...)%s, then RESUME TRANSFORM %s; or DROP TRANSFORM %s and define it again",
		what, p.Table, alter, name, name)
}

// fixCapture makes capture of a source fit its table again, so that the
// table's writers do not fail in the capture trigger: a captured column
// that was dropped is no longer recorded (NULL keeps its place in the
// ledger), and one that is back is recorded again; a key column that was
// dropped leaves nothing capture can record, so capture is removed and the
// source is marked disrupted (RESUME reinstalls it). The table's lock is
// taken with a short lock_timeout, before the DDL lock, and the work is
// tried again on a later pass if it is not granted: in-flight writes that
// ran the old capture function commit before the new one is in place.
func (w *Worker) fixCapture(ctx context.Context, id int) error {
	var what, table string
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var name string
		if err := tx.QueryRow(ctx, w.Cat.SQL(`SELECT format('%%I.%%I', schema_name, table_name) FROM %[1]s.sources WHERE id = $1`), id).Scan(&name); err != nil {
			if err == pgx.ErrNoRows {
				return nil
			}
			return err
		}
		if err := locks.SetTimeout(ctx, tx, capture.LockTimeout); err != nil {
			return err
		}
		// CREATE OR REPLACE FUNCTION locks no table: this lock is what
		// makes writes that ran the old function commit first, and keeps
		// the table's columns as they are until the new one is in place.
		var exists bool
		if err := tx.QueryRow(ctx, sqlTableExists, name).Scan(&exists); err != nil || !exists {
			return err
		}
		if _, err := tx.Exec(ctx, w.Cat.SQL(sqlLockTable, name, capture.LockMode)); err != nil {
			return err
		}
		if err := locks.DDL(ctx, tx, w.Cat.Schema); err != nil {
			return err
		}
		var s catalog.Source
		var names, types []string
		err := tx.QueryRow(ctx, w.Cat.SQL(sqlSourceToFix), id).Scan(&s.ID, &s.Schema, &s.Table, &s.KeyCols, &s.KeyTypes,
			&s.CapCols, &s.CapTypes, &s.Partitioned, &s.Partitions, &names, &types)
		if err == pgx.ErrNoRows {
			return nil
		}
		if err != nil {
			return err
		}
		table = s.Schema + "." + s.Table
		var gone []string
		for _, k := range s.KeyCols {
			if !slices.Contains(names, k) {
				gone = append(gone, k)
			}
		}
		if len(gone) > 0 {
			// Nothing can say which rows change: capture goes, so that
			// writes succeed; every reader reads the key, and is paused.
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlLockTable, name, "ACCESS EXCLUSIVE")); err != nil {
				return err
			}
			if err := w.Names.Uninstall(ctx, tx, s); err != nil {
				return err
			}
			what = fmt.Sprintf("key column %s of %s was dropped: capture of the table is removed until RESUME", strings.Join(gone, ", "), table)
			if _, err := tx.Exec(ctx, w.Cat.SQL(sqlSetRemoved), s.ID, what); err != nil {
				return err
			}
			return w.Cat.BumpGen(ctx, tx)
		}
		newTypes := slices.Clone(s.CapTypes)
		var dropped, back []string
		for i, c := range s.CapCols {
			at := slices.Index(names, c)
			switch {
			case at < 0 && !capture.IsUnrecorded(newTypes[i]):
				newTypes[i] = capture.Unrecorded(newTypes[i])
				dropped = append(dropped, c)
			case at >= 0 && capture.IsUnrecorded(newTypes[i]):
				newTypes[i] = types[at]
				back = append(back, c)
			}
		}
		if len(dropped) == 0 && len(back) == 0 {
			return nil
		}
		s.CapTypes = newTypes
		// Install, not only the functions: it revokes every function from
		// PUBLIC and points each trigger at its operation's function, also
		// for a source whose triggers an older release installed.
		if err := w.Names.Install(ctx, tx, s); err != nil {
			return fmt.Errorf("replacing the capture of %s: %w", table, err)
		}
		if _, err := tx.Exec(ctx, w.Cat.SQL(sqlSetCapTypes), s.ID, newTypes); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, w.Cat.SQL(sqlSetFingerprint, w.Names.FingerprintSQL()), s.ID); err != nil {
			return err
		}
		var parts []string
		if len(dropped) > 0 {
			parts = append(parts, "no longer records dropped column "+strings.Join(dropped, ", "))
		}
		if len(back) > 0 {
			parts = append(parts, "records column "+strings.Join(back, ", ")+" again")
		}
		what = "capture of " + table + " " + strings.Join(parts, " and ")
		return w.Cat.BumpGen(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("fitting capture of %s to its columns: %w", cmp.Or(table, fmt.Sprint("source ", id)), err)
	}
	if what != "" {
		w.Logger.Warn(what, "table", table)
	}
	return nil
}
