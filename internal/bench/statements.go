package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// statementsShown is how many statements a statements report lists.
const statementsShown = 25

// statements collects pg_stat_statements over the phases a benchmark
// chooses (Options.Statements); it does nothing when not asked for.
type statements struct {
	e  *env
	on bool
}

// newStatements creates the extension in the benchmark's database when
// Options.Statements asks for it.
func (e *env) newStatements(ctx context.Context) (*statements, error) {
	st := &statements{e: e, on: e.s.opts.Statements}
	if !st.on {
		return st, nil
	}
	if err := e.exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return nil, err
	}
	return st, nil
}

// reset forgets what was counted so far.
func (st *statements) reset(ctx context.Context) {
	if !st.on {
		return
	}
	if err := st.e.exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		st.e.logf("resetting pg_stat_statements: %v", err)
	}
}

// report logs the statements counted since the last reset, the costliest
// first, with their calls per change (changes: what the phase wrote).
func (st *statements) report(ctx context.Context, what string, changes float64) {
	if !st.on {
		return
	}
	rows, err := st.e.pool.Query(ctx, `
SELECT calls, total_exec_time, total_plan_time, rows, regexp_replace(query, '\s+', ' ', 'g')
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time + total_plan_time DESC LIMIT $1`, statementsShown)
	if err != nil {
		st.e.logf("reading pg_stat_statements: %v", err)
		return
	}
	type stmt struct {
		Calls      int64
		Exec, Plan float64
		Rows       int64
		Query      string
	}
	ss, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stmt])
	if err != nil {
		st.e.logf("reading pg_stat_statements: %v", err)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "statements of %s (%0.f changes), by total time:\n", what, changes)
	fmt.Fprintf(&b, "%10s %10s %10s %12s  %s\n", "calls", "per change", "ms total", "µs/change", "query")
	for _, s := range ss {
		q := s.Query
		if len(q) > 160 {
			q = q[:160] + "..."
		}
		fmt.Fprintf(&b, "%10d %10.4f %10.1f %12.2f  %s\n", s.Calls, float64(s.Calls)/changes, s.Exec+s.Plan, (s.Exec+s.Plan)*1000/changes, q)
	}
	st.e.logf("%s", b.String())
}
