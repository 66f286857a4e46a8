package trellis_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// waitQuarantine polls QuarantineStatus until ok says it is what the test
// waits for.
func (e *env) waitQuarantine(c *trellis.Client, address string, ok func(trellis.QuarantineEntry) bool) trellis.QuarantineEntry {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last trellis.QuarantineEntry
	for time.Now().Before(deadline) {
		q, err := c.QuarantineStatus(e.ctx, address)
		require.NoError(e.t, err)
		if ok(q) {
			return q
		}
		last = q
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("%s never got where the test waits; last %+v", address, last)
	return last
}

func sampleKeys(p trellis.SamplePage) []string {
	var out []string
	for _, s := range p.Samples {
		out = append(out, s.Key)
	}
	return out
}

func TestColumnQuarantine(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g, 1 FROM generate_series(1, 100) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM ratios FROM items SELECT a + b AS total, a / b AS ratio`)
	require.NoError(t, err)
	_, err = c.Apply(e.ctx, `TRANSFORM ratio_copy FROM ratios SELECT ratio AS r`)
	require.NoError(t, err)
	e.waitState(c, "ratios", trellis.StateLive)
	e.waitState(c, "ratio_copy", trellis.StateLive)

	// Rows on which ratio fails: three new ones and an update.
	e.exec(`INSERT INTO items VALUES (101, 1, 0), (102, 2, 0), (103, 3, 0), (104, 4, 4)`)
	e.exec(`UPDATE items SET b = 0 WHERE id = 5`)
	e.converge(c)

	q := e.waitQuarantine(c, "ratios.ratio", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	require.Contains(t, q.Error, "division by zero")
	require.Equal(t, pgerrcode.DivisionByZero, q.SQLState)
	require.EqualValues(t, 4, q.Rows)
	require.Contains(t, q.Reason, "RESUME TRANSFORM ratios.ratio")
	st, err := c.Status(e.ctx, "ratios")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State, "the transform keeps applying its other columns")
	require.Nil(t, st.HeldKeys)
	e.waitState(c, "ratio_copy", trellis.StateCatchingUp)

	all, err := c.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, "ratios.ratio", all[0].Target)
	total, err := c.QuarantineStatus(e.ctx, "ratios.total")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, total.State)
	_, err = c.QuarantineStatus(e.ctx, "ratios.nope")
	require.Equal(t, trellis.CodeNotFound, trellis.CodeOf(err))

	// The failed rows page by (table, key), through a cursor that survives
	// its string form.
	p1, err := c.SampleQuarantined(e.ctx, "ratios.ratio", trellis.SampleOptions{Limit: 3})
	require.NoError(t, err)
	require.Equal(t, []string{"101", "102", "103"}, sampleKeys(p1))
	require.Equal(t, "public.items", p1.Samples[0].SrcTable)
	require.Contains(t, p1.Samples[0].Error, "division by zero")
	require.NotNil(t, p1.NextCursor)
	cur, err := trellis.ParseCursor(p1.NextCursor.String())
	require.NoError(t, err)
	p2, err := c.SampleQuarantined(e.ctx, "ratios.ratio", trellis.SampleOptions{Limit: 3, After: cur})
	require.NoError(t, err)
	require.Equal(t, []string{"5"}, sampleKeys(p2))
	require.Nil(t, p2.NextCursor)
	_, err = trellis.ParseCursor("not a cursor")
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err))

	// Every other column of those rows, and every other row, kept applying.
	require.Equal(t, [][]string{{"5", "5"}, {"101", "1"}, {"102", "2"}, {"104", "8"}},
		e.rows(`SELECT id, total FROM ratios WHERE id IN (5, 101, 102, 104) ORDER BY id`))
	e.exec(`UPDATE items SET a = a + 1000 WHERE id = 10`)
	e.converge(c)
	require.Equal(t, [][]string{{"1011"}}, e.rows(`SELECT total FROM ratios WHERE id = 10`))

	// Fixed rows leave the sample as their changes apply.
	e.exec(`UPDATE items SET b = 1 WHERE id IN (101, 102)`)
	e.converge(c)
	q = e.waitQuarantine(c, "ratios.ratio", func(q trellis.QuarantineEntry) bool { return q.Rows == 2 })
	require.Equal(t, trellis.StatePaused, q.State)
	e.exec(`UPDATE items SET b = 1 WHERE b = 0`)
	e.converge(c)
	e.waitQuarantine(c, "ratios.ratio", func(q trellis.QuarantineEntry) bool { return q.Rows == 0 })

	res, err := c.Apply(e.ctx, `RESUME TRANSFORM ratios.ratio`)
	require.NoError(t, err)
	require.Equal(t, trellis.Resumed{Addresses: []string{"ratios.ratio"}}, res)
	e.waitState(c, "ratios", trellis.StateLive)
	e.waitState(c, "ratio_copy", trellis.StateLive)
	e.converge(c)
	e.assertMatches("ratios", `SELECT id, a + b AS total, a / b AS ratio FROM items`)
	e.assertMatches("ratio_copy", `SELECT id, ratio AS r FROM ratios`)
	all, err = c.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Empty(t, all)
}

func TestColumnQuarantineAgainOnResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g, 1 FROM generate_series(1, 50) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM ratios FROM items SELECT a / b AS ratio, a AS a`)
	require.NoError(t, err)
	e.waitState(c, "ratios", trellis.StateLive)
	e.exec(`UPDATE items SET b = 0 WHERE id = 7`)
	e.converge(c)
	e.waitQuarantine(c, "ratios.ratio", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	// Resumed with the row still bad: the column re-derives, and the bad
	// row quarantines it again; nothing else stops.
	_, err = c.Apply(e.ctx, `RESUME TRANSFORM ratios.ratio`)
	require.NoError(t, err)
	e.waitState(c, "ratios", trellis.StateLive)
	q := e.waitQuarantine(c, "ratios.ratio", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused && q.Rows == 1 })
	require.Contains(t, q.Error, "division by zero")
	e.exec(`UPDATE items SET b = 2 WHERE id = 7`)
	_, err = c.Apply(e.ctx, `RESUME TRANSFORM ratios.ratio`)
	require.NoError(t, err)
	e.waitState(c, "ratios", trellis.StateLive)
	e.converge(c)
	e.assertMatches("ratios", `SELECT id, a / b AS ratio, a AS a FROM items`)
}

func TestPoisonedKeys(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g FROM generate_series(1, 50) g`)
	for _, s := range []string{
		`TRANSFORM big FROM items SELECT qty AS qty`,
		`TRANSFORM doubled FROM items SELECT qty * 2 AS dbl`,
		`TRANSFORM shares FROM items SELECT qty AS q WHERE 100 / qty > 0`,
	} {
		_, err := c.Apply(e.ctx, s)
		require.NoError(t, err)
	}
	for _, n := range []string{"big", "doubled", "shares"} {
		e.waitState(c, n, trellis.StateLive)
	}
	start := time.Now().Add(-time.Second)
	// A constraint the user added to the target refuses some rows; a WHERE
	// raises on another.
	e.exec(`ALTER TABLE big ADD CONSTRAINT qty_small CHECK (qty < 1000)`)
	e.exec(`INSERT INTO items VALUES (107, 5000), (108, 5000), (109, 0)`)
	e.exec(`UPDATE items SET qty = 2000 WHERE id = 3`)
	e.converge(c)

	st, err := c.Status(e.ctx, "big")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State)
	require.NotNil(t, st.HeldKeys)
	require.EqualValues(t, 3, st.HeldKeys.Count)
	require.False(t, st.HeldKeys.OldestPoisonedAt.IsZero())
	st, err = c.Status(e.ctx, "shares")
	require.NoError(t, err)
	require.NotNil(t, st.HeldKeys)
	require.EqualValues(t, 1, st.HeldKeys.Count)
	// The other transforms applied every row.
	e.assertMatches("doubled", `SELECT id, qty * 2 AS dbl FROM items`)
	e.assertMatches("shares", `SELECT id, qty AS q FROM items WHERE qty <> 0 AND 100 / qty > 0`)

	poisoned, err := c.PoisonedSince(e.ctx, start)
	require.NoError(t, err)
	require.Len(t, poisoned, 4)
	byKey := map[string]trellis.PoisonEntry{}
	for _, p := range poisoned {
		byKey[p.Transform+" "+p.Key] = p
	}
	require.Contains(t, byKey["public.big 107"].Error, "qty_small")
	require.Equal(t, "public.items", byKey["public.big 107"].SrcTable)
	require.Contains(t, byKey["public.shares 109"].Error, "division by zero")
	later, err := c.PoisonedSince(e.ctx, poisoned[len(poisoned)-1].PoisonedAt)
	require.NoError(t, err)
	require.Empty(t, later)
	page, err := c.SampleQuarantined(e.ctx, "big", trellis.SampleOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"107", "108", "3"}, sampleKeys(page))
	all, err := c.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, "big", all[0].Target)
	require.EqualValues(t, 3, all[0].HeldKeys.Count)

	// Later changes of a held key are held too.
	e.exec(`UPDATE items SET qty = 7 WHERE id = 3`)
	e.converge(c)
	require.Equal(t, [][]string{{"3"}}, e.rows(`SELECT qty FROM big WHERE id = 3`))

	// Releasing a key whose cause remains poisons it again; one not held is
	// not found.
	require.NoError(t, c.ReleaseKey(e.ctx, "big", "items", "107"))
	st, err = c.Status(e.ctx, "big")
	require.NoError(t, err)
	require.EqualValues(t, 3, st.HeldKeys.Count)
	err = c.ReleaseKey(e.ctx, "big", "public.items", "1")
	require.Equal(t, trellis.CodeNotFound, trellis.CodeOf(err))
	err = c.ReleaseKey(e.ctx, "nope", "items", "1")
	require.Equal(t, trellis.CodeNotFound, trellis.CodeOf(err))

	// Released once fixed: the key takes its current row.
	require.NoError(t, c.ReleaseKey(e.ctx, "big", "public.items", "3"))
	require.Equal(t, [][]string{{"7"}}, e.rows(`SELECT qty FROM big WHERE id = 3`))
	st, err = c.Status(e.ctx, "big")
	require.NoError(t, err)
	require.EqualValues(t, 2, st.HeldKeys.Count)

	// RESUME releases every key.
	e.exec(`UPDATE items SET qty = 1 WHERE qty >= 1000 OR qty = 0`)
	for _, n := range []string{"big", "shares"} {
		res, err := c.Apply(e.ctx, `RESUME TRANSFORM `+n)
		require.NoError(t, err)
		require.Equal(t, trellis.Resumed{Addresses: []string{n}}, res)
		st, err = c.Status(e.ctx, n)
		require.NoError(t, err)
		require.Nil(t, st.HeldKeys)
	}
	e.converge(c)
	e.assertMatches("big", `SELECT id, qty FROM items`)
	e.assertMatches("shares", `SELECT id, qty AS q FROM items WHERE 100 / qty > 0`)
	e.assertMatches("doubled", `SELECT id, qty * 2 AS dbl FROM items`)
	all, err = c.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Empty(t, all)
}

// Bad rows present before a transform is defined quarantine the column in
// its build, for every shape; the build goes on and the transform goes live.
func TestQuarantineInBuildsAndShapes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE grps (id int PRIMARY KEY, div int NOT NULL, name text NOT NULL)`)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, grp int NOT NULL, a int NOT NULL, b int NOT NULL)`)
	e.exec(`CREATE INDEX ON items (grp)`)
	e.exec(`INSERT INTO grps SELECT g, 1, 'g' || g FROM generate_series(1, 10) g`)
	e.exec(`INSERT INTO items SELECT g, g % 10 + 1, g, 1 FROM generate_series(1, 200) g`)
	e.exec(`UPDATE items SET b = 0 WHERE id = 33`) // group 4
	e.exec(`UPDATE grps SET div = 0 WHERE id = 6`)
	for _, s := range []string{
		`TRANSFORM per_row FROM items SELECT a / b AS r, a AS a`,
		`TRANSFORM per_grp FROM items SELECT grp AS grp, sum(a) AS total, sum(a / b) AS ratio GROUP BY grp`,
		`TRANSFORM joined FROM items JOIN grps ON items.grp = grps.id SELECT items.id AS id, items.a / grps.div AS q, grps.name AS name`,
	} {
		_, err := c.Apply(e.ctx, s)
		require.NoError(t, err)
	}
	for _, n := range []string{"per_row", "per_grp", "joined"} {
		e.waitState(c, n, trellis.StateLive)
	}
	cases := []struct {
		address string
		keys    []string
	}{
		{"per_row.r", []string{"33"}},
		{"per_grp.ratio", []string{"4"}},
		{"joined.q", nil}, // every item of group 6
	}
	for _, tc := range cases {
		q, err := c.QuarantineStatus(e.ctx, tc.address)
		require.NoError(t, err)
		require.Equal(t, trellis.StatePaused, q.State, tc.address)
		require.Contains(t, q.Error, "division by zero", tc.address)
		page, err := c.SampleQuarantined(e.ctx, tc.address, trellis.SampleOptions{})
		require.NoError(t, err)
		if tc.keys != nil {
			require.Equal(t, tc.keys, sampleKeys(page), tc.address)
		} else {
			require.Len(t, page.Samples, 20, tc.address)
		}
	}
	// The healthy columns are right for every row and group.
	e.assertMatches("(SELECT id, a FROM per_row) x", `SELECT id, a FROM items`)
	e.assertMatches("(SELECT grp, total FROM per_grp) x", `SELECT grp, sum(a) FROM items GROUP BY grp`)
	e.assertMatches("(SELECT id, name FROM joined) x", `SELECT items.id, grps.name FROM items JOIN grps ON items.grp = grps.id`)

	// Changes keep flowing to the healthy columns, on both sides of the join.
	e.exec(`UPDATE items SET a = a + 1000 WHERE id IN (33, 35)`)
	e.exec(`UPDATE grps SET name = 'renamed' WHERE id = 6`)
	e.converge(c)
	e.assertMatches("(SELECT id, a FROM per_row) x", `SELECT id, a FROM items`)
	e.assertMatches("(SELECT grp, total FROM per_grp) x", `SELECT grp, sum(a) FROM items GROUP BY grp`)
	e.assertMatches("(SELECT id, name FROM joined) x", `SELECT items.id, grps.name FROM items JOIN grps ON items.grp = grps.id`)

	// Fixed and resumed, every target equals a fresh recompute.
	e.exec(`UPDATE items SET b = 1 WHERE id = 33`)
	e.exec(`UPDATE grps SET div = 2 WHERE id = 6`)
	for _, tc := range cases {
		_, err := c.Apply(e.ctx, `RESUME TRANSFORM `+tc.address)
		require.NoError(t, err)
	}
	for _, n := range []string{"per_row", "per_grp", "joined"} {
		e.waitState(c, n, trellis.StateLive)
	}
	e.converge(c)
	e.assertMatches("per_row", `SELECT id, a / b AS r, a AS a FROM items`)
	e.assertMatches("per_grp", `SELECT grp, sum(a) AS total, sum(a / b) AS ratio FROM items GROUP BY grp`)
	e.assertMatches("joined", `SELECT items.id, grps.id, items.a / grps.div AS q, grps.name AS name FROM items JOIN grps ON items.grp = grps.id`)
	all, err := c.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Empty(t, all)
}

// Under concurrent writers and two clients' drain workers, bad rows keep
// arriving: the healthy column stays exact, the samples end up exactly the
// rows that are bad now, poisoned keys are held for their transform only,
// and after the fix and RESUME every target equals a fresh recompute.
func TestQuarantineUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	other := e.connect(trellis.Options{DrainWorkers: 2})
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g, 1 FROM generate_series(1, 2000) g`)
	for _, s := range []string{
		`TRANSFORM ratios FROM items SELECT a + b AS total, a / b AS ratio`,
		`TRANSFORM guarded FROM items SELECT a AS a`,
		`TRANSFORM plain FROM items SELECT a AS a, b AS b`,
	} {
		_, err := c.Apply(e.ctx, s)
		require.NoError(t, err)
	}
	for _, n := range []string{"ratios", "guarded", "plain"} {
		e.waitState(c, n, trellis.StateLive)
	}
	e.exec(`ALTER TABLE guarded ADD CONSTRAINT small CHECK (a < 900000)`)

	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for time.Now().Before(stop) {
				id := rng.IntN(2200) + 1
				var err error
				switch r := rng.IntN(100); {
				case r < 3:
					_, err = e.db.Exec(e.ctx, `INSERT INTO items VALUES ($1, $2, 0) ON CONFLICT (id) DO UPDATE SET b = 0`, id, id)
				case r < 5:
					_, err = e.db.Exec(e.ctx, `UPDATE items SET a = 900000 + $1 WHERE id = $1`, id)
				case r < 8:
					_, err = e.db.Exec(e.ctx, `DELETE FROM items WHERE id = $1`, id)
				case r < 20:
					_, err = e.db.Exec(e.ctx, `UPDATE items SET b = 1 WHERE id = $1`, id)
				default:
					_, err = e.db.Exec(e.ctx, `INSERT INTO items VALUES ($1, $2, 1) ON CONFLICT (id) DO UPDATE SET a = items.a % 1000 + $2`, id, rng.IntN(1000))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(uint64(w))
	}
	wg.Wait()
	e.converge(c)
	e.converge(other)

	q, err := c.QuarantineStatus(e.ctx, "ratios.ratio")
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, q.State)
	// The healthy columns are exact; the samples are the rows bad now.
	rst, err := c.Status(e.ctx, "ratios")
	require.NoError(t, err)
	require.Nil(t, rst.HeldKeys, "ratios holds keys")
	e.assertMatches("(SELECT id, total FROM ratios) x", `SELECT id, a + b FROM items`)
	e.assertMatches("plain", `SELECT id, a, b FROM items`)
	var samples []string
	var after *trellis.Cursor
	for {
		p, err := c.SampleQuarantined(e.ctx, "ratios.ratio", trellis.SampleOptions{Limit: 50, After: after})
		require.NoError(t, err)
		samples = append(samples, sampleKeys(p)...)
		if p.NextCursor == nil {
			break
		}
		after = p.NextCursor
	}
	bad := e.rows(`SELECT id::text FROM items WHERE b = 0 ORDER BY id::text`)
	var want []string
	for _, r := range bad {
		want = append(want, r[0])
	}
	require.Equal(t, want, samples)
	require.EqualValues(t, len(want), q.Rows)

	// Keys guarded holds cover every row its constraint refuses; every
	// other key is exact.
	st, err := c.Status(e.ctx, "guarded")
	require.NoError(t, err)
	require.NotNil(t, st.HeldKeys)
	page, err := c.SampleQuarantined(e.ctx, "guarded", trellis.SampleOptions{Limit: 10000})
	require.NoError(t, err)
	require.EqualValues(t, len(page.Samples), st.HeldKeys.Count)
	held := map[string]bool{}
	for _, s := range page.Samples {
		held[s.Key] = true
	}
	for _, r := range e.rows(`SELECT id::text FROM items WHERE a >= 900000`) {
		require.True(t, held[r[0]], "key %s violates the constraint but is not held", r[0])
	}
	heldList := make([]string, 0, len(held))
	for k := range held {
		heldList = append(heldList, k)
	}
	e.assertMatches("(SELECT id, a FROM guarded WHERE NOT id::text = ANY('"+pgArray(heldList)+"')) x",
		`SELECT id, a FROM items WHERE NOT id::text = ANY('`+pgArray(heldList)+`')`)

	e.exec(`UPDATE items SET b = 1 WHERE b = 0`)
	e.exec(`UPDATE items SET a = 1 WHERE a >= 900000`)
	for _, a := range []string{"ratios.ratio", "guarded"} {
		_, err := c.Apply(e.ctx, `RESUME TRANSFORM `+a)
		require.NoError(t, err)
	}
	e.waitState(c, "ratios", trellis.StateLive)
	e.converge(c)
	e.assertMatches("ratios", `SELECT id, a + b AS total, a / b AS ratio FROM items`)
	e.assertMatches("guarded", `SELECT id, a FROM items`)
	all, err := c.Quarantined(e.ctx)
	require.NoError(t, err)
	require.Empty(t, all)
}

// pgArray renders strings as the body of a text[] literal.
func pgArray(vals []string) string {
	return "{" + strings.Join(vals, ",") + "}"
}

// A release that cannot get at the target in time is CodeTimeout and
// changes nothing: the key stays held, and a later release goes through.
func TestReleaseKeyTimeoutChangesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g FROM generate_series(1, 10) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM big FROM items SELECT qty AS qty`)
	require.NoError(t, err)
	e.waitState(c, "big", trellis.StateLive)
	e.exec(`ALTER TABLE big ADD CONSTRAINT small CHECK (qty < 1000)`)
	e.exec(`UPDATE items SET qty = 5000 WHERE id = 4`)
	e.converge(c)
	e.exec(`UPDATE items SET qty = 4 WHERE id = 4`)
	e.converge(c)

	holder, err := e.db.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(e.ctx) }()
	_, err = holder.Exec(e.ctx, `LOCK TABLE big IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	err = c.ReleaseKey(e.ctx, "big", "items", "4")
	require.Equal(t, trellis.CodeTimeout, trellis.CodeOf(err), "%v", err)
	require.NoError(t, holder.Rollback(e.ctx))

	st, err := c.Status(e.ctx, "big")
	require.NoError(t, err)
	require.NotNil(t, st.HeldKeys)
	require.EqualValues(t, 1, st.HeldKeys.Count)
	require.NoError(t, c.ReleaseKey(e.ctx, "big", "items", "4"))
	e.assertMatches("big", `SELECT id, qty FROM items`)
}

// Drain connections killed again and again while pages are diagnosed lose
// nothing and record nothing twice: the diagnosis commits with its page.
func TestQuarantineSurvivesKilledDrainConnections(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g, 1 FROM generate_series(1, 4000) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM ratios FROM items SELECT a + b AS total, a / b AS ratio`)
	require.NoError(t, err)
	e.waitState(c, "ratios", trellis.StateLive)
	e.exec(`ALTER TABLE ratios ADD CONSTRAINT small CHECK (total < 100000)`)

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 8; i++ {
			time.Sleep(150 * time.Millisecond)
			_, _ = e.db.Exec(e.ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE application_name = 'trellis worker' AND datname = current_database() AND pid <> pg_backend_pid()`)
		}
	}()
	for i := 0; i < 6; i++ {
		e.exec(`UPDATE items SET a = a + 1, b = (id % 9 <> $1)::int`, i)
		e.exec(`UPDATE items SET a = 200000 WHERE id = $1`, 100+i)
		time.Sleep(100 * time.Millisecond)
	}
	<-done
	e.converge(c)

	q := e.waitQuarantine(c, "ratios.ratio", func(q trellis.QuarantineEntry) bool { return q.State == trellis.StatePaused })
	// The samples are the rows bad now (a held key's sample stays as it was
	// when it was last applied: its changes are held).
	page, err := c.SampleQuarantined(e.ctx, "ratios.ratio", trellis.SampleOptions{Limit: 10000})
	require.NoError(t, err)
	require.EqualValues(t, len(page.Samples), q.Rows)
	var got []string
	for _, s := range page.Samples {
		if s.Key < "100" || s.Key > "105" || len(s.Key) != 3 {
			got = append(got, s.Key)
		}
	}
	var want []string
	for _, r := range e.rows(`SELECT id::text FROM items WHERE b = 0 AND id NOT BETWEEN 100 AND 105 ORDER BY 1`) {
		want = append(want, r[0])
	}
	require.Equal(t, want, got)
	st, err := c.Status(e.ctx, "ratios")
	require.NoError(t, err)
	require.NotNil(t, st.HeldKeys)
	require.EqualValues(t, 6, st.HeldKeys.Count, "each refused key is held once")
	e.assertMatches("(SELECT id, total FROM ratios WHERE id NOT BETWEEN 100 AND 105) x",
		`SELECT id, a + b FROM items WHERE id NOT BETWEEN 100 AND 105`)
}

// A whole-table failure poisons every key; RESUME of a transform holding
// that many rebuilds it instead of releasing them one by one.
func TestWholeTableFailureResumeRebuilds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, 1 FROM generate_series(1, 6000) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM big FROM items SELECT qty AS qty`)
	require.NoError(t, err)
	e.waitState(c, "big", trellis.StateLive)
	e.exec(`ALTER TABLE big ADD CONSTRAINT small CHECK (qty < 10)`)
	e.exec(`UPDATE items SET qty = 50`)
	e.converge(c)
	st, err := c.Status(e.ctx, "big")
	require.NoError(t, err)
	require.NotNil(t, st.HeldKeys)
	require.EqualValues(t, 6000, st.HeldKeys.Count)
	poisoned, err := c.PoisonedSince(e.ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, poisoned, 6000)

	e.exec(`UPDATE items SET qty = 5`)
	res, err := c.Apply(e.ctx, `RESUME TRANSFORM big`)
	require.NoError(t, err)
	require.Equal(t, trellis.Resumed{Addresses: []string{"big"}}, res)
	require.Equal(t, [][]string{{"rebuild"}}, e.rows(`SELECT build_kind FROM trellis.transforms WHERE target_name = 'big'`),
		"so many held keys are re-derived by a rebuild, not one by one")
	st = e.waitState(c, "big", trellis.StateLive)
	require.Nil(t, st.HeldKeys)
	e.converge(c)
	e.assertMatches("big", `SELECT id, qty FROM items`)
}

// A GROUP BY that raises on a row stops applying to that transform alone
// (every recompute of it reads the row): it is paused with a capture
// failure of kind halt that names the error, and every other transform
// reading the table goes on. Fixed and resumed, it is exact.
func TestGroupByThatRaisesStopsOnlyItsTransform(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, code text NOT NULL, qty int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, (g % 5)::text, g FROM generate_series(1, 100) g`)
	for _, s := range []string{
		`TRANSFORM per_code FROM items SELECT code::int AS code, sum(qty) AS total GROUP BY code::int WITHOUT SOURCE INDEX`,
		`TRANSFORM copy FROM items SELECT code AS code, qty AS qty`,
	} {
		_, err := c.Apply(e.ctx, s)
		require.NoError(t, err)
	}
	e.waitState(c, "per_code", trellis.StateLive)
	e.waitState(c, "copy", trellis.StateLive)

	e.exec(`BEGIN; INSERT INTO items VALUES (500, 'x1', 7); UPDATE items SET qty = qty + 1 WHERE id <= 10; COMMIT`)
	e.converge(c)
	e.assertMatches("copy", `SELECT id, code, qty FROM items`)
	st, err := c.Status(e.ctx, "per_code")
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, st.State)
	require.NotNil(t, st.CaptureFailure)
	require.Equal(t, trellis.CaptureFailureHalt, st.CaptureFailure.Kind)
	require.Contains(t, st.CaptureFailure.Error, "invalid input syntax")
	require.Contains(t, st.CaptureFailure.Error, "RESUME")
	e.exec(`UPDATE items SET qty = qty + 1 WHERE id > 90`)
	e.converge(c)
	e.assertMatches("copy", `SELECT id, code, qty FROM items`)

	e.exec(`UPDATE items SET code = '3' WHERE id = 500`)
	_, err = c.Apply(e.ctx, `RESUME TRANSFORM per_code`)
	require.NoError(t, err)
	e.waitState(c, "per_code", trellis.StateLive)
	e.converge(c)
	e.assertMatches("per_code", `SELECT code::int AS code, sum(qty) AS total FROM items GROUP BY code::int`)
}

// A changed row whose group cannot be computed, though the definition's
// WHERE leaves it out of every group, is held as a source row of that
// transform alone; the page goes on, and a release re-stages the row.
func TestGroupByThatRaisesOnAFilteredRowHoldsTheRow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, code text NOT NULL, qty int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, (g % 5)::text, g FROM generate_series(1, 100) g`)
	_, err := c.Apply(e.ctx, `TRANSFORM per_code FROM items SELECT code::int AS code, sum(qty) AS total WHERE code ~ '^[0-9]+$' GROUP BY code::int WITHOUT SOURCE INDEX`)
	require.NoError(t, err)
	e.waitState(c, "per_code", trellis.StateLive)

	e.exec(`BEGIN; INSERT INTO items VALUES (500, 'x1', 7); UPDATE items SET qty = qty + 1 WHERE id <= 10; COMMIT`)
	e.converge(c)
	st, err := c.Status(e.ctx, "per_code")
	require.NoError(t, err)
	require.Equal(t, trellis.StateLive, st.State, "%+v", st.CaptureFailure)
	require.NotNil(t, st.HeldKeys)
	require.EqualValues(t, 1, st.HeldKeys.Count)
	p, err := c.PoisonedSince(e.ctx, time.Time{})
	require.NoError(t, err)
	require.Len(t, p, 1)
	require.Equal(t, "public.items", p[0].SrcTable)
	require.Equal(t, "500", p[0].Key)
	require.Contains(t, p[0].Error, "invalid input syntax")
	recompute := `SELECT code::int AS code, sum(qty) AS total FROM items WHERE code ~ '^[0-9]+$' GROUP BY code::int`
	e.assertMatches("per_code", recompute)

	// A row leaving a group for a bad value leaves that group right.
	e.exec(`UPDATE items SET code = 'x2' WHERE id = 7`)
	e.converge(c)
	e.assertMatches("per_code", recompute)
	e.exec(`UPDATE items SET code = '3' WHERE id = 7`)
	e.converge(c)
	e.assertMatches("per_code", recompute)
	require.NoError(t, c.ReleaseKey(e.ctx, "per_code", "items", "7"))

	// The fix's own change still carries the old code, so the row stays
	// held until released; then it is staged afresh from its current row.
	e.exec(`UPDATE items SET code = '3' WHERE id = 500`)
	e.converge(c)
	require.NoError(t, c.ReleaseKey(e.ctx, "per_code", "items", "500"))
	e.converge(c)
	st, err = c.Status(e.ctx, "per_code")
	require.NoError(t, err)
	require.Nil(t, st.HeldKeys)
	e.assertMatches("per_code", recompute)
}

// With standard_conforming_strings off on the database (a backslash in a
// literal then escapes the quote after it), Trellis connects (its
// connections pin it on), capture runs in writers' sessions that have it
// off, and keys ending in a backslash are diagnosed, poisoned and released
// exactly (the diagnosis passes key values as parameters), while the
// page's other keys apply.
func TestDiagnosisOfKeysEndingInBackslash(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var db string
	require.NoError(t, e.db.QueryRow(e.ctx, "SELECT current_database()").Scan(&db))
	e.exec(fmt.Sprintf(`ALTER DATABASE %q SET standard_conforming_strings = off`, db))
	e.exec(`CREATE TABLE items (name text PRIMARY KEY, qty int NOT NULL)`)
	e.exec(`INSERT INTO items VALUES ('plain', 1)`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM big FROM items SELECT qty AS qty`)
	require.NoError(t, err)
	e.waitState(c, "big", trellis.StateLive)
	start := time.Now().Add(-time.Second)
	e.exec(`ALTER TABLE big ADD CONSTRAINT qty_small CHECK (qty < 1000)`)
	// A writer's session has the database's setting: capture runs under it.
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE ON items TO %s")
	var scs string
	require.NoError(t, writer.QueryRow(e.ctx, `SHOW standard_conforming_strings`).Scan(&scs))
	require.Equal(t, "off", scs)
	_, err = writer.Exec(e.ctx, `INSERT INTO items VALUES ($1, 5000), ($2, 2), ($3, 5000)`, `bad\`, `good\`, `x\'); DROP TABLE big; --\`)
	require.NoError(t, err)
	e.converge(c)

	st, err := c.Status(e.ctx, "big")
	require.NoError(t, err)
	require.Nil(t, st.DrainFailure)
	require.NotNil(t, st.HeldKeys)
	require.EqualValues(t, 2, st.HeldKeys.Count)
	poisoned, err := c.PoisonedSince(e.ctx, start)
	require.NoError(t, err)
	var keys []string
	for _, p := range poisoned {
		keys = append(keys, p.Key)
	}
	require.ElementsMatch(t, []string{`bad\`, `x\'); DROP TABLE big; --\`}, keys)
	require.Equal(t, [][]string{{"1"}, {"2"}}, e.rows(`SELECT qty FROM big ORDER BY qty`))

	_, err = writer.Exec(e.ctx, `UPDATE items SET qty = 3 WHERE name = $1`, `bad\`)
	require.NoError(t, err)
	require.NoError(t, c.ReleaseKey(e.ctx, "big", "items", `bad\`))
	e.converge(c)
	require.Equal(t, [][]string{{"1"}, {"2"}, {"3"}}, e.rows(`SELECT qty FROM big ORDER BY qty`))
}
