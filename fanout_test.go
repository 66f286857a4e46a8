package trellis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// fanoutKeys are text keys whose array-literal text needs quoting: empty,
// blank-edged, the word NULL, delimiters, braces, quotes, backslashes.
var fanoutKeys = []string{"", " a", "b ", "NULL", "null", "x,y", "{z}", `q"q`, `back\slash`, `ends\`, "tab\there", "new\nline", "ünï", "(1,2)"}

// Many transforms read one source, so a page's changed keys are shared by
// the transforms that recompute exactly those keys (projections, a join's
// FROM side; decision 0059) while others (a GROUP BY, the joined side) find
// their own; one transform holds a key the others apply. Under concurrent
// writers and the workers of two clients, every target ends equal to a
// fresh recompute: no key lost, none applied twice or to the wrong target.
func TestTransformsOfOneSourceShareAPagesKeys(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.engine()
	other := e.connect(trellis.Options{DrainWorkers: 2})
	e.exec(`CREATE TABLE fan (k text PRIMARY KEY, n int NOT NULL, s text)`)
	e.exec(`INSERT INTO fan SELECT 'k' || g, g, 's' || (g % 7) FROM generate_series(1, 300) g`)
	e.exec(`INSERT INTO fan SELECT k, 1000 + i, NULL FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i)`, fanoutKeys)
	e.exec(`CREATE TABLE fan_tags (s text PRIMARY KEY, label text NOT NULL)`)
	e.exec(`INSERT INTO fan_tags SELECT 's' || g, 'tag ' || g FROM generate_series(0, 6) g`)
	e.exec(`CREATE TABLE fan2 (a int, b text, v int NOT NULL, PRIMARY KEY (a, b))`)
	e.exec(`INSERT INTO fan2 SELECT g % 20, k, g FROM generate_series(1, 60) g, unnest($1::text[]) AS k WHERE g % 3 = 0`, fanoutKeys[:6])
	defs := map[string]string{
		"fan_n":      `SELECT k, n FROM fan`,
		"fan_dbl":    `SELECT k, n * 2 AS d FROM fan WHERE n % 3 = 0`,
		"fan_s":      `SELECT k, s, n FROM fan`,
		"fan_held":   `SELECT k, n FROM fan`,
		"fan_join":   `SELECT f.k, t.s, t.label, f.n FROM fan f JOIN fan_tags t ON t.s = f.s`,
		"fan_groups": `SELECT s, sum(n) AS total, count(*) AS cnt FROM fan GROUP BY s`,
		"fan2_v":     `SELECT a, b, v FROM fan2`,
		"fan2_odd":   `SELECT a, b, v + 1 AS w FROM fan2 WHERE v % 2 = 1`,
	}
	for _, s := range []string{
		`TRANSFORM fan_n FROM fan SELECT n AS n`,
		`TRANSFORM fan_dbl FROM fan SELECT n * 2 AS d WHERE n % 3 = 0`,
		`TRANSFORM fan_s FROM fan SELECT s AS s, n AS n`,
		`TRANSFORM fan_held FROM fan SELECT n AS n`,
		`TRANSFORM fan_join FROM fan f JOIN fan_tags t ON t.s = f.s SELECT t.label AS label, f.n AS n`,
		`TRANSFORM fan_groups FROM fan SELECT s AS s, sum(n) AS total, count(*) AS cnt GROUP BY s`,
		`TRANSFORM fan2_v FROM fan2 SELECT v AS v`,
		`TRANSFORM fan2_odd FROM fan2 SELECT v + 1 AS w WHERE v % 2 = 1`,
	} {
		_, err := c.Apply(e.ctx, s)
		require.NoError(t, err, s)
	}
	for n := range defs {
		e.waitState(c, n, trellis.StateLive)
	}
	// fan_held refuses one row: its key is held there, and applied by
	// every other transform reading it.
	e.exec(`ALTER TABLE fan_held ADD CONSTRAINT fan_held_small CHECK (n < 1000000)`)
	e.exec(`UPDATE fan SET n = 2000001 WHERE k = 'k7'`)

	keyOf := func(rng *rand.Rand) string {
		if rng.IntN(3) == 0 {
			return fanoutKeys[rng.IntN(len(fanoutKeys))]
		}
		return fmt.Sprintf("k%d", rng.IntN(400)+1)
	}
	write := func(ctx context.Context, pool *pgxpool.Pool, seed uint64, stop <-chan struct{}, writes *atomic.Int64) error {
		rng := rand.New(rand.NewPCG(seed, 59))
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			// A transaction's writes take their row locks in one order
			// (fan by key, then fan2 by (a, b)), so writers never
			// deadlock with each other: a deadlock here would be
			// Trellis's.
			type op struct {
				order string
				q     string
				args  []any
			}
			var ops []op
			for range 1 + rng.IntN(4) {
				k := keyOf(rng)
				if k == "k7" {
					continue
				}
				a, b := rng.IntN(20), fanoutKeys[rng.IntN(6)]
				fan2At := fmt.Sprintf("2 %03d %s", a, b)
				switch rng.IntN(6) {
				case 0:
					ops = append(ops, op{"1 " + k, `DELETE FROM fan WHERE k = $1`, []any{k}})
				case 1:
					ops = append(ops, op{"1 " + k, `INSERT INTO fan VALUES ($1, $2, $3) ON CONFLICT (k) DO UPDATE SET n = EXCLUDED.n`, []any{k, rng.IntN(900), fmt.Sprintf("s%d", rng.IntN(8))}})
				case 2:
					ops = append(ops, op{"1 " + k, `UPDATE fan SET s = $2 WHERE k = $1`, []any{k, fmt.Sprintf("s%d", rng.IntN(8))}})
				case 3:
					ops = append(ops, op{fan2At, `INSERT INTO fan2 VALUES ($1, $2, $3) ON CONFLICT (a, b) DO UPDATE SET v = EXCLUDED.v`, []any{a, b, rng.IntN(100)}})
				case 4:
					ops = append(ops, op{fan2At, `DELETE FROM fan2 WHERE a = $1 AND b = $2`, []any{a, b}})
				default:
					ops = append(ops, op{"1 " + k, `UPDATE fan SET n = n + 1 WHERE k = $1`, []any{k}})
				}
			}
			sort.SliceStable(ops, func(i, j int) bool { return ops[i].order < ops[j].order })
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for _, o := range ops {
					if _, err := tx.Exec(ctx, o.q, o.args...); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			writes.Add(1)
		}
	}
	e.writeConcurrently(4, 1, 600, write)
	e.converge(c)
	e.converge(other)

	for n, q := range defs {
		if n == "fan_held" {
			q = `SELECT k, n FROM fan WHERE k <> 'k7'`
			e.assertMatches(`(SELECT k, n FROM fan_held WHERE k <> 'k7') x`, q)
			continue
		}
		e.assertMatches(n, q)
	}
	st, err := c.Status(e.ctx, "fan_held")
	require.NoError(t, err)
	require.NotNil(t, st.HeldKeys)
	require.EqualValues(t, 1, st.HeldKeys.Count)
	require.Equal(t, [][]string{{"2000001"}}, e.rows(`SELECT n FROM fan_n WHERE k = 'k7'`))
	require.Equal(t, [][]string{{"7"}}, e.rows(`SELECT n FROM fan_held WHERE k = 'k7'`))
}
