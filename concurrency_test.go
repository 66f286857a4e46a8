package trellis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// shapes are the definitions the concurrency tests maintain, with the
// fresh recompute each target must equal.
var shapes = []struct{ stmt, target, recompute string }{
	{"TRANSFORM even_items FROM items SELECT v * 2 AS doubled, note AS note WHERE v % 2 = 0", "even_items",
		"SELECT id, v * 2 AS doubled, note FROM items WHERE v % 2 = 0"},
	{"TRANSFORM item_notes FROM items i SELECT upper(i.note) AS loud, i.v AS v", "item_notes",
		"SELECT id, upper(note) AS loud, v FROM items"},
	{"TRANSFORM even_items_big FROM even_items SELECT doubled + 1 AS plus_one WHERE doubled > 50", "even_items_big",
		"SELECT id, doubled + 1 AS plus_one FROM (SELECT id, v * 2 AS doubled FROM items WHERE v % 2 = 0) s WHERE doubled > 50"},
	{"TRANSFORM pair_sums FROM pairs SELECT a::text || b AS s, label AS label", "pair_sums",
		"SELECT a, b, a::text || b AS s, label FROM pairs"},
	{"TRANSFORM big_buckets FROM even_items_big SELECT plus_one % 10 AS b, count(*) AS n, sum(plus_one) AS total GROUP BY plus_one % 10", "big_buckets",
		"SELECT plus_one % 10 AS b, count(*) AS n, sum(plus_one) AS total FROM (SELECT id, v * 2 + 1 AS plus_one FROM items WHERE v % 2 = 0 AND v * 2 > 50) s GROUP BY 1"},
	{"TRANSFORM note_stats FROM items SELECT note AS note, count(*) AS n, max(v) AS top, string_agg(id::text, ',' ORDER BY id) AS ids WHERE v > 10 GROUP BY note", "note_stats",
		"SELECT note, count(*) AS n, max(v) AS top, string_agg(id::text, ',' ORDER BY id) AS ids FROM items WHERE v > 10 GROUP BY note"},
	{"TRANSFORM item_owners FROM items i JOIN owners o ON o.id = i.v SELECT i.id AS item, o.name AS owner, i.note AS note", "item_owners",
		"SELECT i.id AS item, o.id AS o_id, o.name AS owner, i.note FROM items i JOIN owners o ON o.id = i.v"},
	{"TRANSFORM item_owners_left FROM items i LEFT JOIN owners o ON o.id = i.v SELECT i.id AS item, o.id AS owner_id, o.name AS owner", "item_owners_left",
		"SELECT i.id AS item, o.id AS owner_id, o.name AS owner FROM items i LEFT JOIN owners o ON o.id = i.v"},
	{"TRANSFORM team_totals FROM items i JOIN owners o ON o.id = i.v SELECT o.team AS team, count(*) AS n, sum(i.v) AS total GROUP BY o.team", "team_totals",
		"SELECT o.team, count(*) AS n, sum(i.v) AS total FROM items i JOIN owners o ON o.id = i.v GROUP BY o.team"},
	{"TRANSFORM event_amounts FROM events SELECT amount * 2 AS doubled", "event_amounts",
		"SELECT id, region, amount * 2 AS doubled FROM events"},
	{"TRANSFORM region_amounts FROM events SELECT region AS region, sum(amount) AS total, count(*) AS n GROUP BY region", "region_amounts",
		"SELECT region, sum(amount) AS total, count(*) AS n FROM events GROUP BY region"},
}

func createShapeSources(e *env) {
	e.exec(`CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL, note text)`)
	e.exec(`INSERT INTO items SELECT g, g % 100, 'n' || g FROM generate_series(1, 2000) g`)
	e.exec(`CREATE TABLE pairs (a int, b text, label text, PRIMARY KEY (a, b))`)
	e.exec(`INSERT INTO pairs SELECT g % 50, 'k' || (g / 50), 'l' || g FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING`)
	e.exec(`CREATE TABLE owners (id int PRIMARY KEY, name text, team int)`)
	e.exec(`INSERT INTO owners SELECT g, 'o' || g, g % 5 FROM generate_series(1, 80) g`)
	e.exec(`CREATE TABLE events (id bigint, region int, amount int, PRIMARY KEY (id, region)) PARTITION BY LIST (region)`)
	for _, r := range []string{"0", "1", "2"} {
		e.exec(`CREATE TABLE events_` + r + ` PARTITION OF events FOR VALUES IN (` + r + `)`)
	}
	e.exec(`INSERT INTO events SELECT g, g % 3, g FROM generate_series(1, 600) g`)
}

// randomWriters are writeRandomly loops on the test's pool.
type randomWriters struct {
	writes atomic.Int64 // write transactions the writers ran so far
	quit   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	errs   chan error
}

// startWriters starts n writeRandomly loops on the test's pool, seeded
// seed, seed+1, ...; they run until stop, or until the test ends.
func (e *env) startWriters(n int, seed uint64) *randomWriters {
	w := &randomWriters{quit: make(chan struct{}), errs: make(chan error, n)}
	for i := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.errs <- writeRandomly(e.ctx, e.db, seed+uint64(i), w.quit, &w.writes)
		}()
	}
	e.t.Cleanup(w.halt)
	return w
}

// halt stops the writers and waits for them; it is safe more than once.
func (w *randomWriters) halt() {
	w.once.Do(func() {
		close(w.quit)
		w.wg.Wait()
		close(w.errs)
	})
}

// stop stops the writers, waits for them, and fails the test if one of
// them failed.
func (w *randomWriters) stop(t *testing.T) {
	t.Helper()
	w.halt()
	for err := range w.errs {
		require.NoError(t, err)
	}
}

// writeRandomly runs random inserts, updates (including key changes),
// deletes, multi-statement transactions and rollbacks until stop closes.
func writeRandomly(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error {
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for n := 1 + r.IntN(4); n > 0; n-- {
				id := r.Int64N(3000) + 1
				var q string
				var args []any
				switch r.IntN(14) {
				case 0, 1:
					q, args = `INSERT INTO items VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`, []any{id, r.IntN(100), fmt.Sprint("w", r.IntN(10))}
				case 2, 3:
					q, args = `UPDATE items SET v = v + 1 WHERE id = $1`, []any{id}
				case 4:
					q, args = `UPDATE items SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM items WHERE id = $2)`, []any{id, r.Int64N(3000) + 1}
				case 5:
					q, args = `DELETE FROM items WHERE id = $1`, []any{id}
				case 6:
					q, args = `UPDATE items SET note = NULL WHERE id BETWEEN $1 AND $1 + 20`, []any{id}
				case 7:
					q, args = `INSERT INTO pairs VALUES ($1, $2, 'x') ON CONFLICT (a, b) DO UPDATE SET label = pairs.label || '+'`, []any{r.IntN(60), fmt.Sprint("k", r.IntN(30))}
				case 8:
					q, args = `UPDATE pairs SET a = a + 100 WHERE a = $1 AND b = $2 AND NOT EXISTS (SELECT 1 FROM pairs WHERE a = $1 + 100 AND b = $2)`, []any{r.IntN(60), fmt.Sprint("k", r.IntN(30))}
				case 9:
					q, args = `UPDATE owners SET team = $2, name = name || '.' WHERE id = $1`, []any{r.IntN(100), r.IntN(6)}
				case 10:
					q, args = `INSERT INTO owners VALUES ($1, 'n', $2) ON CONFLICT (id) DO UPDATE SET id = owners.id + 1000`, []any{r.IntN(100), r.IntN(5)}
				case 11:
					q, args = `DELETE FROM owners WHERE id = $1`, []any{r.IntN(100)}
				case 12:
					q, args = `INSERT INTO events VALUES ($1, $2, $3) ON CONFLICT (id, region) DO UPDATE SET amount = events.amount + 1`, []any{r.Int64N(800), r.IntN(2), r.IntN(100)}
				case 13:
					q, args = `UPDATE events SET region = $2 WHERE id = $1 AND region <> $2 AND NOT EXISTS (SELECT 1 FROM events WHERE id = $1 AND region = $2)`, []any{r.Int64N(800), r.IntN(2)}
				}
				if _, err := tx.Exec(ctx, q, args...); err != nil {
					return err
				}
			}
			if r.IntN(10) == 0 {
				time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond) // a slow transaction, committing late
			}
			if r.IntN(15) == 0 {
				return errRollback
			}
			return nil
		})
		if err != nil && err != errRollback && ctx.Err() == nil {
			// Concurrent key changes can collide or deadlock; those
			// transactions roll back like any application's would.
			if !isExpectedWriteConflict(err) {
				return err
			}
		}
		writes.Add(1)
	}
}

var errRollback = fmt.Errorf("deliberate rollback")

func isExpectedWriteConflict(err error) bool {
	s := err.Error()
	for _, code := range []string{pgerrcode.UniqueViolation, pgerrcode.DeadlockDetected, pgerrcode.SerializationFailure} {
		if contains(s, code) {
			return true
		}
	}
	return false
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func defineShapes(e *env, c *trellis.Client) {
	e.t.Helper()
	for _, s := range shapes {
		_, err := c.Define(e.ctx, s.stmt)
		require.NoError(e.t, err, s.stmt)
	}
	for _, s := range shapes {
		e.waitState(c, s.target, trellis.StateLive)
	}
}

func TestConcurrentWritesConverge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createShapeSources(e)
	staging := e.engine()
	// A second process of the fleet with its own drain workers.
	e.connect(trellis.Options{DrainWorkers: 2})
	defineShapes(e, staging)

	w := e.startWriters(4, 1)
	e.writesPast(&w.writes, 200)
	// Partitions come and go while the writes run: a table with rows is
	// attached, another detached.
	e.exec(`CREATE TABLE events_9 (id bigint, region int, amount int, PRIMARY KEY (id, region))`)
	e.exec(`INSERT INTO events_9 SELECT g, 9, g FROM generate_series(1, 50) g`)
	e.exec(`ALTER TABLE events ATTACH PARTITION events_9 FOR VALUES IN (9)`)
	e.exec(`ALTER TABLE events DETACH PARTITION events_2`)
	e.writesPast(&w.writes, 200)
	w.stop(t)
	require.Greater(t, w.writes.Load(), int64(100))
	for _, s := range shapes {
		e.waitState(staging, s.target, trellis.StateLive) // partition corrections re-derive some
	}
	e.converge(staging)
	for _, s := range shapes {
		e.assertMatches(s.target, s.recompute)
		st, err := staging.Status(e.ctx, s.target)
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State)
		require.Nil(t, st.DrainFailure)
	}
	t.Logf("%d write transactions", w.writes.Load())
}

func TestCrashesLoseNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	createShapeSources(e)
	// Partitioned, so that it is built in pages (a plain table this size
	// is built in one statement) and the crash lands mid-build.
	e.exec(`CREATE TABLE big (id bigint PRIMARY KEY, v int) PARTITION BY RANGE (id)`)
	e.exec(`CREATE TABLE big_1 PARTITION OF big FOR VALUES FROM (MINVALUE) TO (75001)`)
	e.exec(`CREATE TABLE big_2 PARTITION OF big FOR VALUES FROM (75001) TO (MAXVALUE)`)
	e.exec(`INSERT INTO big SELECT g, g % 1000 FROM generate_series(1, 150000) g`)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))

	// The staging worker dies mid-backfill, the way a process does: its
	// connections are cut, then the client is abandoned.
	opts := trellis.Options{URL: e.url, Logger: quietLogger(), Staging: true, DrainWorkers: 1, PollInterval: 20 * time.Millisecond}
	first, err := trellis.Connect(e.ctx, opts)
	require.NoError(t, err)
	_, err = first.Define(e.ctx, "TRANSFORM big_copy FROM big SELECT v + 1 AS w")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return e.rows(`SELECT build_rows > 0 FROM trellis.transforms`)[0][0] == "true"
	}, 30*time.Second, 5*time.Millisecond)
	e.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'trellis%' AND datname = current_database() AND pid <> pg_backend_pid()`)
	require.NoError(t, first.Close())
	st := e.rows(`SELECT state, build_cursor IS NOT NULL, build_rows FROM trellis.transforms`)[0]
	if st[0] == "backfilling" {
		require.Equal(t, "true", st[1], "a build in progress keeps its cursor")
	}
	e.exec(`UPDATE big SET v = v + 7 WHERE id % 1000 = 0`)
	e.exec(`DELETE FROM big WHERE id % 777 = 0`)

	second := e.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	status := e.waitState(second, "big_copy", trellis.StateLive)
	// The build resumed where it stopped: it wrote each row once.
	var n int64
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT count(*) FROM big`).Scan(&n))
	require.LessOrEqual(t, status.BuildRows, int64(150000))
	e.converge(second)
	e.assertMatches("big_copy", "SELECT id, v + 1 AS w FROM big")

	// Drain workers' connections are killed mid-page, repeatedly, under writes.
	defineShapes(e, second)
	w := e.startWriters(3, 100)
	for i := 0; i < 8; i++ {
		time.Sleep(300 * time.Millisecond)
		e.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'trellis worker' AND datname = current_database() AND pid <> pg_backend_pid()`)
	}
	w.stop(t)
	e.converge(second)
	for _, s := range shapes {
		e.assertMatches(s.target, s.recompute)
	}
}
