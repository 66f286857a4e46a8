// Package funcwatch keeps a target equal to its definition when a user
// function the definition calls changes: it records, when a transform is
// defined, which functions it calls and a fingerprint of each, and finds
// the transforms whose functions were since replaced (CREATE OR REPLACE
// FUNCTION) or dropped, to re-derive them or pause them with the reason.
// The views a definition inlined are watched alike: one replaced or
// dropped pauses its readers with the reason.
package funcwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/plan"
)

// Probe returns the user functions a definition's query calls, with
// their fingerprints: it creates a temporary view over the query in a
// savepoint, reads what PostgreSQL recorded the view depends on, and
// rolls the savepoint back. Functions in pg_catalog are left out.
func Probe(ctx context.Context, tx pgx.Tx, query string) ([]plan.Function, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sp.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := sp.Exec(ctx, sqlProbeView+query); err != nil {
		return nil, fmt.Errorf("reading the functions the definition calls: %w", err)
	}
	rows, err := sp.Query(ctx, sqlDepends, "pg_temp."+ident.Quote(probeView))
	if err != nil {
		return nil, fmt.Errorf("reading the functions the definition calls: %w", err)
	}
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (plan.Function, error) {
		var f plan.Function
		err := r.Scan(&f.OID, &f.Signature, &f.Fingerprint)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the functions the definition calls: %w", err)
	}
	return fns, sp.Rollback(ctx)
}

// ReadsClock returns, for the first of fns whose body reads the clock,
// the refusal naming it and what it calls; "" when none does. Bodies are
// read by their tokens (grammar.ClockIn): functions in other languages,
// and what a function calls in turn, are not seen.
func ReadsClock(ctx context.Context, q catalog.Querier, fns []plan.Function) (string, error) {
	if len(fns) == 0 {
		return "", nil
	}
	oids := make([]uint32, len(fns))
	for i, f := range fns {
		oids[i] = f.OID
	}
	rows, err := q.Query(ctx, sqlBodies, oids)
	if err != nil {
		return "", fmt.Errorf("reading the bodies of the functions the definition calls: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var sig, body string
		if err := rows.Scan(&sig, &body); err != nil {
			return "", err
		}
		if what := grammar.ClockIn(body); what != "" {
			return grammar.ClockMessage("function " + sig + ", which calls " + what + ","), nil
		}
	}
	return "", rows.Err()
}

// AnyChanged reports whether some transform calls a function that was
// replaced or dropped since it was recorded: the read-only check that
// lets the caller take the instance's DDL lock only when needed.
func AnyChanged(ctx context.Context, q catalog.Querier, cat *catalog.Catalog) (bool, error) {
	ids, err := changed(ctx, q, cat)
	return len(ids) > 0, err
}

func changed(ctx context.Context, q catalog.Querier, cat *catalog.Catalog) ([]int, error) {
	rows, err := q.Query(ctx, cat.SQL(sqlChanged))
	if err != nil {
		return nil, fmt.Errorf("checking the functions transforms call: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("checking the functions transforms call: %w", err)
	}
	rows, err = q.Query(ctx, cat.SQL(sqlViewsChanged))
	if err != nil {
		return nil, fmt.Errorf("checking the views transforms read: %w", err)
	}
	views, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("checking the views transforms read: %w", err)
	}
	for _, id := range views {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// Change is what Rederive did to one transform.
type Change struct {
	Target plan.Target
	// Functions are the signatures of the functions that changed, Views
	// the names of the views that changed.
	Functions []string
	Views     []string
	// Paused is set when the definition no longer runs (a function it
	// calls is gone): the transform is paused with Reason. Otherwise a
	// transform that was not paused is rebuilt.
	Paused bool
	Reason string
}

// Rederive handles every transform whose functions changed: one whose
// definition still runs records the functions it calls now and, unless
// it is paused (RESUME rebuilds), is rebuilt; one that no longer runs is
// paused with the reason. The caller's transaction should hold the
// instance's DDL lock.
func Rederive(ctx context.Context, tx pgx.Tx, cat *catalog.Catalog) ([]Change, error) {
	ids, err := changed(ctx, tx, cat)
	if err != nil {
		return nil, err
	}
	var out []Change
	for _, id := range ids {
		t, err := cat.TransformByID(ctx, tx, id, true)
		if err != nil {
			return nil, err
		}
		if t == nil {
			continue
		}
		ch, err := rederive(ctx, tx, cat, t)
		if err != nil {
			return nil, fmt.Errorf("re-deriving %s after a function it calls changed: %w", t.Target, err)
		}
		out = append(out, ch)
	}
	return out, nil
}

func rederive(ctx context.Context, tx pgx.Tx, cat *catalog.Catalog, t *catalog.Transform) (Change, error) {
	ch := Change{Target: t.Target}
	oids := make([]uint32, len(t.Spec.Functions))
	for i, f := range t.Spec.Functions {
		oids[i] = f.OID
	}
	now, err := currentFingerprints(ctx, tx, sqlCurrent, oids)
	if err != nil {
		return ch, err
	}
	var gone []string
	var kept []plan.Function
	for _, f := range t.Spec.Functions {
		fp := now[f.OID]
		switch {
		case fp == nil:
			ch.Functions = append(ch.Functions, f.Signature)
			gone = append(gone, f.Signature)
		case *fp != f.Fingerprint:
			ch.Functions = append(ch.Functions, f.Signature)
			f.Fingerprint = *fp
			kept = append(kept, f)
		default:
			kept = append(kept, f)
		}
	}
	spec := t.Spec
	fns, perr := Probe(ctx, tx, t.Plan().Query())
	var pe *pgconn.PgError
	switch {
	case perr == nil:
		spec.Functions = fns
		clock, err := ReadsClock(ctx, tx, fns)
		if err != nil {
			return ch, err
		}
		if clock != "" {
			ch.Paused = true
			ch.Reason = fmt.Sprintf("function %s that the definition calls was replaced: %s", strings.Join(ch.Functions, ", "), clock)
		}
	case errors.As(perr, &pe):
		// The definition no longer runs: pause it, and record the
		// functions as they are, so the pause is reported once.
		spec.Functions = kept
		ch.Paused = true
		what := "changed"
		if len(gone) > 0 {
			what = "dropped"
		}
		ch.Reason = fmt.Sprintf("function %s that the definition calls was %s, and the definition no longer runs (%s): restore the function, or DROP TRANSFORM and define it again",
			strings.Join(ch.Functions, ", "), what, pe.Message)
	default:
		return ch, perr
	}
	views, reason, err := viewChanges(ctx, tx, spec.Views)
	if err != nil {
		return ch, err
	}
	spec.Views = views
	if reason != "" {
		ch.Views = changedViews(views, t.Spec.Views)
		ch.Paused, ch.Reason = true, reason
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return ch, err
	}
	if _, err := tx.Exec(ctx, cat.SQL(sqlSetSpec), t.ID, raw); err != nil {
		return ch, err
	}
	if ch.Paused {
		_, err = tx.Exec(ctx, cat.SQL(sqlPause), t.ID, ch.Reason)
	} else {
		_, err = tx.Exec(ctx, cat.SQL(sqlRebuild), t.ID)
	}
	return ch, err
}

// viewChanges marks the recorded views that were replaced or dropped
// since (their fingerprint is the current one, or "" when gone) and says
// why the transform pauses; "" when none changed.
func viewChanges(ctx context.Context, tx pgx.Tx, views []plan.View) ([]plan.View, string, error) {
	if len(views) == 0 {
		return views, "", nil
	}
	oids := make([]uint32, len(views))
	for i, v := range views {
		oids[i] = v.OID
	}
	now, err := currentFingerprints(ctx, tx, sqlViewsCurrent, oids)
	if err != nil {
		return nil, "", err
	}
	out := slices.Clone(views)
	var reasons []string
	moved := false
	for i, v := range out {
		fp := now[v.OID]
		if v.Changed == "" && fp == nil {
			// Gone by its OID: the view of its name with the definition
			// the transform inlined is the same view (a schema dump
			// loaded into another database creates it with another OID).
			var oid uint32
			var named string
			err := tx.QueryRow(ctx, sqlViewByName, v.Name).Scan(&oid, &named)
			switch {
			case err == nil && named == v.Fingerprint:
				out[i].OID, moved = oid, true
				continue
			case err != nil && !errors.Is(err, pgx.ErrNoRows):
				return nil, "", err
			}
		}
		switch {
		case v.Changed != "":
			continue
		case fp == nil:
			out[i].Changed, out[i].Fingerprint = "dropped", ""
		case *fp != v.Fingerprint:
			out[i].Changed, out[i].Fingerprint = "replaced", *fp
		default:
			continue
		}
		reasons = append(reasons, "view "+v.Name+" was "+out[i].Changed)
	}
	if len(reasons) == 0 {
		if moved {
			return out, "", nil
		}
		return views, "", nil
	}
	return out, strings.Join(reasons, ", ") + ": the transform inlined the view's definition when it was defined, and keeps reading that; DROP TRANSFORM and define it again to read the view as it is now", nil
}

// changedViews names the views now marked changed that were not before.
func changedViews(now, was []plan.View) []string {
	var out []string
	for i, v := range now {
		if v.Changed != "" && (i >= len(was) || was[i].Changed == "") {
			out = append(out, v.Name)
		}
	}
	return out
}

// currentFingerprints runs query (sqlCurrent or sqlViewsCurrent) for oids
// and returns each object's fingerprint now: nil for one that is gone.
func currentFingerprints(ctx context.Context, tx pgx.Tx, query string, oids []uint32) (map[uint32]*string, error) {
	rows, err := tx.Query(ctx, query, oids)
	if err != nil {
		return nil, err
	}
	now := map[uint32]*string{}
	for rows.Next() {
		var oid uint32
		var fp *string
		if err := rows.Scan(&oid, &fp); err != nil {
			rows.Close()
			return nil, err
		}
		now[oid] = fp
	}
	rows.Close()
	return now, rows.Err()
}
