package trellis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// Views as sources (decision 0028): a view's query is inlined, its base
// tables are captured and listed, and the targets stay equal to a query of
// the view under concurrent writes with two clients' drain workers. A view
// replaced or dropped later pauses its readers with the reason, and RESUME
// is refused until the transform is defined again.
func TestViewsAsSources(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createShapeSources(e)
	e.exec(`CREATE VIEW busy_items AS SELECT id, v, upper(note) AS loud FROM items WHERE v > 20`)
	e.exec(`CREATE VIEW busy_owned AS SELECT b.id, o.id AS owner_id, b.loud, o.name, o.team FROM busy_items b JOIN owners o ON o.id = b.v`)
	e.exec(`CREATE VIEW team_sizes AS SELECT team, count(*) AS n, sum(id) AS ids FROM owners GROUP BY team`)
	staging := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	shapes := []struct{ stmt, target, recompute string }{
		{`TRANSFORM v_proj FROM busy_items SELECT id, loud, v * 2 AS dbl`, "v_proj", `SELECT id, loud, v * 2 AS dbl FROM busy_items`},
		{`TRANSFORM v_nested FROM busy_owned bo SELECT bo.id, bo.owner_id, bo.name, bo.loud WHERE bo.team <> 2`, "v_nested",
			`SELECT id, owner_id, name, loud FROM busy_owned WHERE team <> 2`},
		{`TRANSFORM v_teams FROM team_sizes SELECT team, n, ids WHERE n > 3`, "v_teams", `SELECT team, n, ids FROM team_sizes WHERE n > 3`},
	}
	for _, s := range shapes {
		_, err := staging.Define(e.ctx, s.stmt)
		require.NoError(t, err, s.stmt)
	}
	for _, s := range shapes {
		e.waitState(staging, s.target, trellis.StateLive)
		e.assertMatches(s.target, s.recompute)
		e.fixIndexGaps(staging, s.target)
	}
	st, err := staging.Status(e.ctx, "v_nested")
	require.NoError(t, err)
	require.Equal(t, []string{"public.items", "public.owners"}, st.Sources)
	require.Equal(t, []string{"public.busy_owned", "public.busy_items"}, st.Views)
	defs, err := staging.Definitions(e.ctx)
	require.NoError(t, err)
	for _, d := range defs {
		if d.Target == "public.v_teams" {
			require.Equal(t, []string{"public.owners"}, d.Sources)
			require.Equal(t, []string{"public.team_sizes"}, d.Views)
		}
	}

	w := e.startWriters(3, 90)
	require.Eventually(t, func() bool { return w.writes.Load() > 300 }, time.Minute, 10*time.Millisecond)
	w.stop(t)
	e.converge(staging)
	for _, s := range shapes {
		e.assertMatches(s.target, s.recompute)
		requireConsistent(t, s.target, e.selfCheck(staging, s.target, trellis.SelfCheckStrict))
	}

	// A view replaced: its readers, also through another view, pause
	// naming it; the others stay live.
	e.exec(`CREATE OR REPLACE VIEW busy_items AS SELECT id, v, upper(note) AS loud FROM items WHERE v > 30`)
	for _, tg := range []string{"v_proj", "v_nested"} {
		st := e.waitState(staging, tg, trellis.StatePaused)
		require.Contains(t, st.PausedReason, "view public.busy_items was replaced", tg)
	}
	_, err = staging.Apply(e.ctx, "RESUME TRANSFORM v_proj")
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), "DROP TRANSFORM and define it again")
	st, err = staging.Status(e.ctx, "v_teams")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)

	// Defined again, it reads the view as it is now.
	_, err = staging.Apply(e.ctx, "DROP TRANSFORM v_proj")
	require.NoError(t, err)
	_, err = staging.Define(e.ctx, shapes[0].stmt)
	require.NoError(t, err)
	e.waitState(staging, "v_proj", trellis.StateLive)
	e.exec(`UPDATE items SET v = 35 WHERE id % 7 = 0`)
	e.converge(staging)
	e.assertMatches("v_proj", shapes[0].recompute)

	// A view dropped pauses its readers.
	e.exec(`DROP VIEW team_sizes`)
	st = e.waitState(staging, "v_teams", trellis.StatePaused)
	require.Contains(t, st.PausedReason, "view public.team_sizes was dropped")
}

// Views Trellis cannot read as their owner would are refused with
// CodeValidation naming the view and why; nothing is created.
func TestViewRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE a (id int PRIMARY KEY, x int, owner text)`)
	e.exec(`CREATE TABLE b (id int PRIMARY KEY, x int)`)
	e.exec(`CREATE TABLE guarded (id int PRIMARY KEY, x int)`)
	e.exec(`ALTER TABLE guarded ENABLE ROW LEVEL SECURITY`)
	e.exec(`CREATE VIEW barrier WITH (security_barrier) AS SELECT id, x FROM a WHERE x > 0`)
	e.exec(`CREATE VIEW invoker WITH (security_invoker = on) AS SELECT id, x FROM a`)
	e.exec(`CREATE VIEW unioned AS SELECT id, x FROM a UNION ALL SELECT id, x FROM b`)
	e.exec(`CREATE VIEW limited AS SELECT id, x FROM a ORDER BY x LIMIT 3`)
	e.exec(`CREATE VIEW through_guard AS SELECT id, x FROM guarded`)
	e.exec(`CREATE VIEW ranked AS SELECT id, x, row_number() OVER (PARTITION BY owner ORDER BY id) AS r FROM a`)
	e.exec(`CREATE MATERIALIZED VIEW frozen AS SELECT id, x FROM a`)
	c := e.engine()
	for _, tc := range []struct{ stmt, msg string }{
		{`TRANSFORM t FROM barrier SELECT id, x`, "view public.barrier is a security_barrier view"},
		{`TRANSFORM t FROM invoker SELECT id, x`, "view public.invoker is a security_invoker view"},
		{`TRANSFORM t FROM a JOIN unioned u ON u.id = a.id SELECT a.id, u.x`, `joining view "unioned", a set operation, is not supported`},
		{`TRANSFORM t FROM limited SELECT id, x`, `LIMIT, OFFSET and FETCH are not supported in view "limited"`},
		{`TRANSFORM t FROM through_guard SELECT id, x`, "reads table public.guarded, which has row level security"},
		{`TRANSFORM t FROM a JOIN ranked r ON r.id = a.id SELECT a.id, r.r`, `view "ranked" computes window functions`},
		{`TRANSFORM t FROM frozen SELECT id, x`, "is a materialized view"},
	} {
		_, err := c.Define(e.ctx, tc.stmt)
		require.Error(t, err, tc.stmt)
		require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), "%s: %v", tc.stmt, err)
		require.Contains(t, err.Error(), tc.msg, tc.stmt)
	}
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Empty(t, defs)
	require.Equal(t, [][]string{{"0"}}, e.rows(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 't'`))
}

// Through a view, PostgreSQL reads the view's tables with its owner's
// rights; Trellis reads them with the definer's. A definer who may read the
// view but not a table under it is refused, naming the table; granted
// SELECT on it, the same definition is accepted.
func TestViewReadWithTheDefinersRights(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var db string
	require.NoError(t, e.db.QueryRow(e.ctx, "SELECT current_database()").Scan(&db))
	_, url := e.roleURL("definer", fmt.Sprintf("GRANT CREATE ON DATABASE %q TO %%s", db), "GRANT CREATE ON SCHEMA public TO %s")
	role := db + "_definer"
	e.exec(`CREATE TABLE secret (id int PRIMARY KEY, x int, note text)`)
	e.exec(`INSERT INTO secret SELECT g, g % 5, 'n' || g FROM generate_series(1, 50) g`)
	e.exec(`CREATE VIEW open_secret AS SELECT id, x FROM secret WHERE x > 0`)
	e.exec(fmt.Sprintf(`GRANT SELECT ON open_secret TO %q`, role))

	m, err := trellis.Connect(e.ctx, trellis.Options{URL: url, Logger: quietLogger()})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Migrate(e.ctx))
	_, err = m.Define(e.ctx, `TRANSFORM peek FROM open_secret SELECT id, x`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), "view public.open_secret reads table public.secret, which you may not read")
	defs, err := m.Definitions(e.ctx)
	require.NoError(t, err)
	require.Empty(t, defs)

	e.exec(fmt.Sprintf(`GRANT SELECT ON secret TO %q`, role))
	_, err = m.Define(e.ctx, `TRANSFORM peek FROM open_secret SELECT id, x`)
	require.NoError(t, err)
	st, err := m.Status(e.ctx, "peek")
	require.NoError(t, err)
	require.Equal(t, []string{"public.secret"}, st.Sources)
	require.Equal(t, []string{"public.open_secret"}, st.Views)
}
