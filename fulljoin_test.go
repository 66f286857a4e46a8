package trellis_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// fullJoins are FULL JOINs of two tables (many to many through a column
// that is neither table's key, one to one on a key, with a filter, and
// keyed by a composite key) and of three (a star and chains: a table
// joined after the FULL JOIN), each with the fresh recompute it must equal.
var fullJoins = []struct{ stmt, target, recompute string }{
	{`TRANSFORM fj_pairs FROM lefts l FULL JOIN rights r ON r.g = l.g SELECT l.id AS lid, r.id AS rid, l.v, r.w, coalesce(l.g, r.g) AS g`,
		"fj_pairs", `SELECT l.id AS lid, r.id AS rid, l.v, r.w, coalesce(l.g, r.g) AS g FROM lefts l FULL JOIN rights r ON r.g = l.g`},
	{`TRANSFORM fj_one FROM lefts l FULL OUTER JOIN rights r ON r.id = l.id SELECT l.v, r.w`,
		"fj_one", `SELECT l.id AS l_id, r.id AS r_id, l.v, r.w FROM lefts l FULL JOIN rights r ON r.id = l.id`},
	{`TRANSFORM fj_filtered FROM rights r FULL JOIN lefts l ON l.g = r.g AND l.h = r.h SELECT r.id, l.id AS lid, r.w * 2 AS w2 WHERE l.v IS DISTINCT FROM 3`,
		"fj_filtered", `SELECT r.id, l.id AS lid, r.w * 2 AS w2 FROM rights r FULL JOIN lefts l ON l.g = r.g AND l.h = r.h WHERE l.v IS DISTINCT FROM 3`},
	// a third table after the FULL JOIN: a star (joined to the FROM
	// table) and chains (joined to the FULL JOIN's table)
	{`TRANSFORM fj_star FROM lefts l FULL JOIN rights r ON r.g = l.g LEFT JOIN notes n ON n.lid = l.id SELECT l.v, r.w, n.note`,
		"fj_star", `SELECT l.id AS l_id, r.id AS r_id, n.lid AS n_lid, n.line AS n_line, l.v, r.w, n.note FROM lefts l FULL JOIN rights r ON r.g = l.g LEFT JOIN notes n ON n.lid = l.id`},
	{`TRANSFORM fj_chain FROM lefts l FULL JOIN rights r ON r.g = l.g JOIN notes n ON n.lid = r.id SELECT l.v, n.note`,
		"fj_chain", `SELECT l.id AS l_id, r.id AS r_id, n.lid AS n_lid, n.line AS n_line, l.v, n.note FROM lefts l FULL JOIN rights r ON r.g = l.g JOIN notes n ON n.lid = r.id`},
	{`TRANSFORM fj_chain_left FROM rights r FULL JOIN lefts l ON l.id = r.id LEFT JOIN notes n ON n.lid = l.id SELECT r.w, l.v, n.note WHERE n.note IS DISTINCT FROM 'x'`,
		"fj_chain_left", `SELECT r.id AS r_id, l.id AS l_id, n.lid AS n_lid, n.line AS n_line, r.w, l.v, n.note FROM rights r FULL JOIN lefts l ON l.id = r.id LEFT JOIN notes n ON n.lid = l.id WHERE n.note IS DISTINCT FROM 'x'`},
	{`TRANSFORM fj_notes FROM lefts l FULL JOIN notes n ON n.lid = l.id SELECT l.v, n.note`,
		"fj_notes", `SELECT l.id AS l_id, n.lid AS n_lid, n.line AS n_line, l.v, n.note FROM lefts l FULL JOIN notes n ON n.lid = l.id`},
}

func createFullJoinSources(e *env) {
	e.exec(`CREATE TABLE lefts (id int PRIMARY KEY, g int, h int, v int)`)
	e.exec(`CREATE TABLE rights (id int PRIMARY KEY, g int, h int, w int)`)
	e.exec(`CREATE TABLE notes (lid int, line int, note text, PRIMARY KEY (lid, line))`)
	e.exec(`INSERT INTO lefts SELECT i, i % 13, i % 3, i % 7 FROM generate_series(1, 120) i`)
	e.exec(`INSERT INTO rights SELECT i, i % 17, i % 2, i FROM generate_series(60, 180) i`)
	e.exec(`INSERT INTO notes SELECT 100 + i / 3, i % 3, 'n' || i FROM generate_series(1, 90) i`)
}

// writeFullJoinSources changes the three tables at random (join columns
// too, to NULL at times), several in one transaction, until stop closes.
func writeFullJoinSources(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error {
	r := rand.New(rand.NewPCG(seed, seed*5+3))
	nullable := func(n int) any {
		if r.IntN(10) == 0 {
			return nil
		}
		return r.IntN(n)
	}
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for n := 1 + r.IntN(3); n > 0; n-- {
				var q string
				var args []any
				switch r.IntN(11) {
				case 0:
					q, args = `INSERT INTO lefts VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`, []any{r.IntN(200), nullable(20), r.IntN(3), nullable(8)}
				case 1:
					q, args = `UPDATE lefts SET g = $2, h = $3 WHERE id = $1`, []any{r.IntN(200), nullable(20), r.IntN(3)}
				case 2:
					q, args = `DELETE FROM lefts WHERE id = $1`, []any{r.IntN(200)}
				case 3:
					q, args = `UPDATE lefts SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM lefts WHERE id = $2)`, []any{r.IntN(200), r.IntN(200)}
				case 4:
					q, args = `INSERT INTO rights VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET w = EXCLUDED.w`, []any{r.IntN(200), nullable(20), r.IntN(2), r.IntN(100)}
				case 5:
					q, args = `UPDATE rights SET g = $2 WHERE id = $1`, []any{r.IntN(200), nullable(20)}
				case 6:
					q, args = `DELETE FROM rights WHERE id = $1`, []any{r.IntN(200)}
				case 7:
					q, args = `UPDATE rights SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM rights WHERE id = $2)`, []any{r.IntN(200), r.IntN(200)}
				case 8:
					q, args = `INSERT INTO notes VALUES ($1, $2, 'x') ON CONFLICT DO NOTHING`, []any{r.IntN(200), r.IntN(4)}
				case 9:
					q, args = `UPDATE notes SET lid = $2 WHERE lid = $1 AND line = 1 AND NOT EXISTS (SELECT 1 FROM notes WHERE lid = $2 AND line = 1)`, []any{r.IntN(200), r.IntN(200)}
				case 10:
					q, args = `DELETE FROM notes WHERE lid = $1`, []any{r.IntN(200)}
				}
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return err
				}
			}
			if r.IntN(12) == 0 {
				return errRollback
			}
			return nil
		})
		if err != nil && !errors.Is(err, errRollback) && ctx.Err() == nil && !isExpectedWriteConflict(err) {
			return err
		}
		writes.Add(1)
	}
}

// TestFullJoinsConverge maintains FULL JOINs while writers change both
// tables at once (rows gaining and losing partners, join columns going
// NULL, keys moving), with two clients' drain workers; every target then
// equals a fresh recompute, both ways, and a self-check finds nothing.
func TestFullJoinsConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createFullJoinSources(e)
	c := e.engine()
	e.connect(trellis.Options{DrainWorkers: 2})
	for _, d := range fullJoins {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range fullJoins {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	// Each ON's columns are looked up on both tables; both tables are
	// the transform's sources.
	st, err := c.Status(e.ctx, "fj_pairs")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.lefts(g)", "public.rights(g)"}, gapNames(st.SourceIndexGaps))
	require.ElementsMatch(t, []string{"public.lefts", "public.rights"}, st.Sources)
	for _, d := range fullJoins {
		e.fixIndexGaps(c, d.target)
	}
	for _, d := range fullJoins {
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	writes := e.writeConcurrently(4, 90, 400, writeFullJoinSources)
	e.converge(c)
	for _, d := range fullJoins {
		e.requireLiveAndExact(c, d.target, d.recompute)
	}
	t.Logf("%d write transactions", writes)

	// Both sides emptied, then refilled.
	e.exec(`DELETE FROM lefts`)
	e.converge(c)
	for _, d := range fullJoins {
		e.assertMatches(d.target, d.recompute)
	}
	e.exec(`TRUNCATE rights`)
	e.exec(`INSERT INTO lefts SELECT i, i % 5, i % 3, i FROM generate_series(1, 30) i`)
	e.exec(`INSERT INTO rights SELECT i, i % 4, i % 2, i FROM generate_series(20, 40) i`)
	e.converge(c)
	for _, d := range fullJoins {
		e.assertMatches(d.target, d.recompute)
	}
}

// A FULL JOIN's failing column is quarantined with samples of the units it
// fails on (rows without a FROM row among them) while its healthy columns
// stay exact; ALTER TRANSFORM adds and drops columns of either side; the
// self-check finds the altered target consistent.
func TestFullJoinQuarantineAlterDump(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE lefts (id int PRIMARY KEY, g int, v int)`)
	e.exec(`CREATE TABLE rights (id int PRIMARY KEY, g int, w int)`)
	e.exec(`INSERT INTO lefts SELECT i, i % 10, i FROM generate_series(1, 40) i`)
	e.exec(`INSERT INTO rights SELECT i, i % 20, 1 + i % 3 FROM generate_series(1, 30) i`)
	e.exec(`UPDATE rights SET w = 0 WHERE id IN (15, 16)`) // g 15 and 16: no lefts row matches
	_, err := c.Define(e.ctx, `TRANSFORM fq FROM lefts l FULL JOIN rights r ON r.g = l.g SELECT l.v, r.w, 100 / r.w AS inv`)
	require.NoError(t, err)
	e.waitState(c, "fq", trellis.StateLive)
	q, err := c.QuarantineStatus(e.ctx, "fq.inv")
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, q.State)
	require.Contains(t, q.Error, "division by zero")
	page, err := c.SampleQuarantined(e.ctx, "fq.inv", trellis.SampleOptions{})
	require.NoError(t, err)
	require.Len(t, page.Samples, 2, "the two rights rows without a partner, each its own unit")
	healthy := `SELECT l.id AS l_id, r.id AS r_id, l.v, r.w FROM lefts l FULL JOIN rights r ON r.g = l.g`
	e.assertMatches("(SELECT l_id, r_id, v, w FROM fq) x", healthy)

	// Writes on both sides reach the healthy columns.
	e.exec(`UPDATE lefts SET g = 15 WHERE id = 1`) // rights 15 gains a partner
	e.exec(`DELETE FROM rights WHERE id = 2`)
	e.exec(`INSERT INTO lefts VALUES (100, NULL, 7)`)
	e.converge(c)
	e.assertMatches("(SELECT l_id, r_id, v, w FROM fq) x", healthy)

	// Fixed and resumed, the target equals a fresh recompute.
	e.exec(`UPDATE rights SET w = 5 WHERE w = 0`)
	_, err = c.Apply(e.ctx, `RESUME TRANSFORM fq.inv`)
	require.NoError(t, err)
	e.waitState(c, "fq", trellis.StateLive)
	e.converge(c)
	e.assertMatches("fq", `SELECT l.id AS l_id, r.id AS r_id, l.v, r.w, 100 / r.w AS inv FROM lefts l FULL JOIN rights r ON r.g = l.g`)

	_, err = c.Apply(e.ctx, `ALTER TRANSFORM fq ADD COLUMN coalesce(l.v, 0) + coalesce(r.w, 0) AS total`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM fq DROP COLUMN w`)
	require.NoError(t, err)
	e.waitState(c, "fq", trellis.StateLive)
	e.exec(`UPDATE rights SET g = 3 WHERE id % 4 = 0`)
	e.exec(`DELETE FROM lefts WHERE id % 5 = 0`)
	e.converge(c)
	altered := `SELECT l.id AS l_id, r.id AS r_id, l.v, 100 / r.w AS inv, coalesce(l.v, 0) + coalesce(r.w, 0) AS total FROM lefts l FULL JOIN rights r ON r.g = l.g`
	e.assertMatches("fq", altered)
	e.fixIndexGaps(c, "fq")
	requireConsistent(t, "fq", e.selfCheck(c, "fq", trellis.SelfCheckStrict))

	// (TestDumpLoadsTransforms loads a FULL JOIN from a dump.)
	dump, err := c.DumpDefinitionsSQL(e.ctx)
	require.NoError(t, err)
	require.Contains(t, dump, "FULL JOIN rights r ON r.g = l.g")
}

// A join reads only the old values of the columns its definition reads:
// a column another transform captures on the same table, retyped to a
// type its old values cannot be matched with (text to integer), halts no
// FULL JOIN or join of three tables that never reads it (they halted with
// "UNION types text and integer cannot be matched", naming no column).
func TestJoinsIgnoreRetypeOfColumnsOthersCapture(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE jq (id int PRIMARY KEY, v int, w text, z text)`)
	e.exec(`CREATE TABLE jr (id int PRIMARY KEY, v int)`)
	e.exec(`CREATE TABLE js (id int PRIMARY KEY, n int)`)
	e.exec(`INSERT INTO jq SELECT g, g % 4, 'b', 'z' || g FROM generate_series(1, 12) g`)
	e.exec(`INSERT INTO jr SELECT g, g % 3 FROM generate_series(1, 8) g`)
	e.exec(`INSERT INTO js SELECT g, g FROM generate_series(1, 10) g`)
	c := e.engine()
	defs := []struct{ stmt, target, recompute string }{
		{`TRANSFORM jfull FROM jq x FULL JOIN jr y ON x.v = y.v SELECT x.id AS xid, y.id AS yid, x.z`,
			"jfull", `SELECT x.id AS xid, y.id AS yid, x.z FROM jq x FULL JOIN jr y ON x.v = y.v`},
		{`TRANSFORM jthree FROM jr y JOIN jq x ON x.v = y.v LEFT JOIN js s ON s.id = x.id SELECT y.id AS yid, x.id AS xid, s.n`,
			"(SELECT yid, xid, n FROM jthree) x", `SELECT y.id AS yid, x.id AS xid, s.n FROM jr y JOIN jq x ON x.v = y.v LEFT JOIN js s ON s.id = x.id`},
		// Reads w of jq: capture records its old values.
		{`TRANSFORM jother FROM jq SELECT v, w UNION SELECT v, 'r' FROM jr`,
			"jother", `SELECT v, w FROM jq UNION SELECT v, 'r' FROM jr`},
	}
	for _, d := range defs {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	name := func(target string) string {
		if target[0] == '(' {
			return "jthree"
		}
		return target
	}
	for _, d := range defs {
		e.waitState(c, name(d.target), trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	e.exec(`ALTER TABLE jq ALTER COLUMN w TYPE int USING 7`)
	e.exec(`UPDATE jq SET v = v + 1 WHERE id < 6`)
	e.exec(`DELETE FROM jq WHERE id = 8`)
	e.converge(c)
	for _, d := range defs {
		st, err := c.Status(e.ctx, name(d.target))
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, "%s: %s", d.target, st.PausedReason)
		require.Nil(t, st.DrainFailure, d.target)
		if d.target != "jother" {
			// jother's own query no longer runs ('r' is no integer).
			e.assertMatches(d.target, d.recompute)
		}
	}
}

// TestFullJoinMovesWithinOnePage: a FROM row's changes that reach one page
// together (no worker running while they commit) add or remove the joined
// rows without a partner exactly when its join column moves: away and
// back (nothing to do), away then another column (the old partner loses
// its match, the new one may gain its first), deleted and inserted again,
// onto a partner that had none, inserted then updated (its update's old
// values are not the page's before: it was not there), and its key moved
// with the join column kept.
func TestFullJoinMovesWithinOnePage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createFullJoinSources(e)
	e.exec(`INSERT INTO rights VALUES (1000, 60, 0, 1), (1001, 61, 0, 1), (1002, 62, 0, 1), (1003, 63, 0, 1), (1004, 64, 0, 1), (1005, 65, 0, 1), (1006, 66, 0, 1)`)
	e.exec(`INSERT INTO lefts VALUES (500, 60, 0, 1), (501, 61, 0, 1), (502, 62, 0, 1), (503, 55, 0, 1), (504, 64, 0, 1), (505, 56, 0, 1)`)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	w := e.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	for _, d := range fullJoins {
		_, err := w.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range fullJoins {
		e.waitState(w, d.target, trellis.StateLive)
		e.fixIndexGaps(w, d.target)
	}
	e.converge(w)
	require.NoError(t, w.Close())

	for _, q := range []string{
		`UPDATE lefts SET g = 63 WHERE id = 500`, `UPDATE lefts SET g = 60 WHERE id = 500`, // away and back
		`UPDATE lefts SET g = 62 WHERE id = 501`, `UPDATE lefts SET v = 9 WHERE id = 501`, // 61 loses its partner
		`DELETE FROM lefts WHERE id = 502`, `INSERT INTO lefts VALUES (502, 62, 0, 2)`, // deleted and back
		`UPDATE lefts SET g = 63 WHERE id = 503`, `UPDATE lefts SET v = 3 WHERE id = 503`, // 63 gains one
		`UPDATE lefts SET g = 65 WHERE id = 505`, `UPDATE lefts SET h = 1 WHERE id = 505`, // 65 gains one, then another column
		`INSERT INTO lefts VALUES (506, 66, 0, 1)`, `UPDATE lefts SET v = 2 WHERE id = 506`, // inserted, then updated
		`UPDATE lefts SET id = 600 WHERE id = 504`,  // the key moves, g stays
		`UPDATE lefts SET v = v + 1 WHERE id < 100`, // other columns only
	} {
		e.exec(q)
	}
	w2 := e.connect(trellis.Options{Staging: true, DrainWorkers: 1})
	e.converge(w2)
	for _, d := range fullJoins {
		e.requireLiveAndExact(w2, d.target, d.recompute)
	}
	require.Equal(t, [][]string{{"1001"}}, e.rows(`SELECT rid FROM fj_pairs WHERE lid IS NULL AND rid >= 1000 ORDER BY rid`))
}
