package trellis_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// windowShapes are window transforms over scores, each with the plain
// query a fresh recompute runs.
var windowShapes = []struct{ stmt, target, recompute string }{
	{`TRANSFORM score_ranks FROM scores SELECT grp, v, sum(v) OVER (PARTITION BY grp) AS grp_total, rank() OVER (PARTITION BY grp ORDER BY v DESC) AS r,
		count(*) OVER (PARTITION BY grp ORDER BY v RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) AS near WHERE v >= 0`,
		"score_ranks", `SELECT grp, id, v, sum(v) OVER (PARTITION BY grp) AS grp_total, rank() OVER (PARTITION BY grp ORDER BY v DESC) AS r,
		count(*) OVER (PARTITION BY grp ORDER BY v RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) AS near FROM scores WHERE v >= 0`},
	{`TRANSFORM score_rows FROM scores s SELECT s.id, lower(s.grp) AS g, row_number() OVER (PARTITION BY lower(s.grp) ORDER BY s.v, s.id) AS n,
		lag(s.v) OVER (PARTITION BY lower(s.grp) ORDER BY s.v, s.id) AS prev`,
		"score_rows", `SELECT lower(grp) AS g, id, row_number() OVER (PARTITION BY lower(grp) ORDER BY v, id) AS n,
		lag(v) OVER (PARTITION BY lower(grp) ORDER BY v, id) AS prev FROM scores`},
	{`TRANSFORM score_running FROM scores SELECT id, sum(v) OVER (ORDER BY v, id) AS running, dense_rank() OVER (ORDER BY grp) AS gr`,
		"score_running", `SELECT id, sum(v) OVER (ORDER BY v, id) AS running, dense_rank() OVER (ORDER BY grp) AS gr FROM scores`},
	{`TRANSFORM score_best FROM scores SELECT DISTINCT ON (grp) grp, id AS best_id, v ORDER BY grp, v DESC, best_id`,
		"score_best", `SELECT DISTINCT ON (grp) grp, id AS best_id, v FROM scores ORDER BY grp, v DESC, id`},
	{`TRANSFORM score_top2 FROM (SELECT id, grp, v, row_number() OVER (PARTITION BY grp ORDER BY v DESC, id) AS rn FROM scores WHERE v >= 0) s SELECT * WHERE rn <= 2`,
		"score_top2", `SELECT grp, id, v, rn FROM (SELECT id, grp, v, row_number() OVER (PARTITION BY grp ORDER BY v DESC, id) AS rn FROM scores WHERE v >= 0) s WHERE rn <= 2`},
	{`TRANSFORM score_top FROM scores SELECT id, v, grp WHERE v IS NOT NULL ORDER BY v DESC, id LIMIT 5`,
		"score_top", `SELECT id, v, grp FROM scores WHERE v IS NOT NULL ORDER BY v DESC, id LIMIT 5`},
}

// Window functions over partitions (and over the whole source) stay
// equal to a fresh recompute under concurrent writers moving rows between
// partitions, with a second client's drain workers; the self-check finds
// them consistent.
func TestWindowFunctions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE scores (id bigint PRIMARY KEY, grp text, v int)`)
	e.exec(`INSERT INTO scores SELECT g, CASE WHEN g % 7 = 0 THEN NULL ELSE 'g' || (g % 5) END, g % 13 FROM generate_series(1, 300) g`)
	c := e.engine()
	for _, d := range windowShapes {
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
	}
	for _, d := range windowShapes {
		e.waitState(c, d.target, trellis.StateLive)
		e.assertMatches(d.target, d.recompute)
	}
	st, err := c.Status(e.ctx, "score_ranks")
	require.NoError(t, err)
	require.Equal(t, []string{"public.scores"}, st.Sources)
	require.Equal(t, []trellis.SourceIndexGap{{Table: "public.scores", Columns: []string{"grp"}, Role: trellis.RolePartitionBy,
		Fix: `CREATE INDEX ON "public"."scores" USING btree (grp);`}}, st.SourceIndexGaps)
	e.exec(`CREATE INDEX ON scores (grp)`)
	e.exec(`CREATE INDEX ON scores (lower(grp))`)
	for _, d := range windowShapes {
		st, err := c.Status(e.ctx, d.target)
		require.NoError(t, err)
		for _, g := range st.SourceIndexGaps {
			// A global top-k wants its ORDER BY's index, in order.
			require.Equal(t, trellis.RoleOrderBy, g.Role, d.target)
			e.exec(g.Fix)
		}
		st, err = c.Status(e.ctx, d.target)
		require.NoError(t, err)
		require.Empty(t, st.SourceIndexGaps, d.target)
	}
	require.Equal(t, [][]string{{"5"}}, e.rows(`SELECT count(*) FROM score_top`))
	// The key: the PARTITION BY outputs, then the source's key.
	require.Equal(t, [][]string{{"grp"}, {"id"}}, e.rows(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = 'score_ranks'::regclass AND i.indisunique ORDER BY array_position(i.indkey::int2[], a.attnum)`))

	// Concurrent writers (inserts, moves between partitions, deletes,
	// NULL partitions), and a second client's drain workers.
	e.connect(trellis.Options{DrainWorkers: 2})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := r.Int64N(400) + 1
				var err error
				switch r.IntN(5) {
				case 0:
					_, err = e.db.Exec(e.ctx, `INSERT INTO scores VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`, id, fmt.Sprint("g", r.IntN(6)), r.IntN(20)-2)
				case 1:
					_, err = e.db.Exec(e.ctx, `UPDATE scores SET grp = $2 WHERE id = $1`, id, fmt.Sprint("G", r.IntN(6)))
				case 2:
					_, err = e.db.Exec(e.ctx, `UPDATE scores SET grp = NULL, v = v + 1 WHERE id = $1`, id)
				case 3:
					_, err = e.db.Exec(e.ctx, `DELETE FROM scores WHERE id = $1`, id)
				case 4:
					_, err = e.db.Exec(e.ctx, `UPDATE scores SET id = id + 1000 WHERE id = $1`, id)
				}
				if err != nil && !isExpectedWriteConflict(err) {
					t.Error(err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	require.Eventually(t, func() bool { return writes.Load() > 500 }, time.Minute, 10*time.Millisecond)
	close(stop)
	wg.Wait()
	e.converge(c)
	for _, d := range windowShapes {
		e.assertMatches(d.target, d.recompute)
		requireConsistent(t, d.target, e.selfCheck(c, d.target, trellis.SelfCheckStrict))
	}

	// A TRUNCATE re-derives everything; new rows after it too.
	e.exec(`TRUNCATE scores`)
	e.exec(`INSERT INTO scores VALUES (1, 'a', 1), (2, 'a', 1), (3, NULL, 5)`)
	e.converge(c)
	for _, d := range windowShapes {
		e.assertMatches(d.target, d.recompute)
	}

	// A projection reads a window target whose key may be NULL (grp is a
	// nullable column; decision 0054), one partitioned by NOT NULL columns
	// (TestWindowChainsConverge), and a top-k's, keyed by its source's key.
	e.requireProjectionReads(c, `TRANSFORM over_ranks FROM score_ranks SELECT r`, "over_ranks", `SELECT grp, id, r FROM score_ranks`)
	_, err = c.Define(e.ctx, `TRANSFORM over_top FROM score_top SELECT v * 2 AS v2`)
	require.NoError(t, err)
	e.waitState(c, "over_top", trellis.StateLive)
	e.exec(`INSERT INTO scores SELECT g, 'b', g FROM generate_series(10, 20) g`)
	e.exec(`DELETE FROM scores WHERE id = 15`)
	e.converge(c)
	e.assertMatches("over_top", `SELECT id, v * 2 AS v2 FROM scores WHERE v IS NOT NULL ORDER BY v DESC, id LIMIT 5`)
}

// A window transform's columns quarantine like any other (the failing
// unit is the partition); ALTER TRANSFORM adds and drops its plain
// columns and refuses to add a window function.
func TestWindowQuarantineAndAlter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE scores (id bigint PRIMARY KEY, grp text, v int NOT NULL)`)
	e.exec(`CREATE INDEX ON scores (grp)`)
	e.exec(`INSERT INTO scores SELECT g, 'g' || (g % 4), g % 7 + 1 FROM generate_series(1, 80) g`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM ranks FROM scores SELECT grp, v, rank() OVER (PARTITION BY grp ORDER BY v) AS r, 100 / v AS inv`)
	require.NoError(t, err)
	e.waitState(c, "ranks", trellis.StateLive)
	e.exec(`INSERT INTO scores VALUES (81, 'g1', 0)`)
	e.converge(c)
	q := e.waitQuarantine(c, "ranks.inv", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	require.Contains(t, q.Error, "division by zero")
	page, err := c.SampleQuarantined(e.ctx, "ranks.inv", trellis.SampleOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Samples, 1)
	require.Equal(t, "g1", page.Samples[0].Key, "the partition is the unit")
	e.exec(`INSERT INTO scores VALUES (82, 'g1', 0), (83, 'g2', 9)`)
	e.converge(c)
	e.assertMatches("(SELECT grp, id, v, r FROM ranks) x", `SELECT grp, id, v, rank() OVER (PARTITION BY grp ORDER BY v) AS r FROM scores`)

	e.exec(`UPDATE scores SET v = 1 WHERE v = 0`)
	e.converge(c)
	_, err = c.Apply(e.ctx, `RESUME TRANSFORM ranks.inv`)
	require.NoError(t, err)
	e.waitState(c, "ranks", trellis.StateLive)
	e.converge(c)
	recompute := `SELECT grp, id, v, rank() OVER (PARTITION BY grp ORDER BY v) AS r, 100 / v AS inv FROM scores`
	e.assertMatches("ranks", recompute)

	_, err = c.Apply(e.ctx, `ALTER TRANSFORM ranks ADD COLUMN upper(grp) AS loud`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM ranks ADD COLUMN sum(v) OVER (PARTITION BY grp) AS total`)
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "cannot add a window function")
	_, err = c.Apply(e.ctx, `ALTER TRANSFORM ranks DROP COLUMN inv`)
	require.NoError(t, err)
	e.exec(`UPDATE scores SET grp = 'g3' WHERE id % 5 = 0`)
	e.waitState(c, "ranks", trellis.StateLive)
	e.converge(c)
	e.assertMatches("ranks", `SELECT grp, id, v, rank() OVER (PARTITION BY grp ORDER BY v) AS r, upper(grp) AS loud FROM scores`)
	requireConsistent(t, "ranks", e.selfCheck(c, "ranks", trellis.SelfCheckStrict))
}
