package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

// Pending is the work not yet applied to one transform's target: the
// committed, captured changes of its sources (and, for a chain, of the
// sources of the transforms upstream of it) that no applied page covers.
type Pending struct {
	ID     int
	Target plan.Target
	// State is the transform's lifecycle state as the catalog stores it.
	State trellistype.State
	// Changes counts the ledger rows pending: those in pages not yet
	// applied, and those committed since the last cut.
	Changes int64
	// Lag is how long the oldest of them has waited, at most: a change in
	// the pages of cut n committed after cut n-1 was taken, one not cut
	// yet after the last cut. 0 when Changes is 0.
	Lag time.Duration
}

// PendingWork reads the pending work of the transform id, or of every
// transform when id is 0, in target order. It scans the pending part of
// the ledger once (through the ledger's xid index), so its cost grows with
// the backlog, not with the ledger.
func PendingWork(ctx context.Context, q catalog.Querier, cat *catalog.Catalog, id int) ([]Pending, error) {
	rows, err := q.Query(ctx, cat.SQL(sqlPendingWork), id)
	if err != nil {
		return nil, fmt.Errorf("reading the pending changes: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Pending, error) {
		var p Pending
		var lagUS int64
		err := r.Scan(&p.ID, &p.Target.Schema, &p.Target.Name, &p.State, &p.Changes, &lagUS)
		if p.Changes > 0 {
			p.Lag = max(time.Duration(lagUS)*time.Microsecond, time.Microsecond)
		}
		return p, err
	})
}
