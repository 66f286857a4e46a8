package trellis_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// The differential test: random definitions over every shape Trellis has
// (projection with WHERE, window functions, top-k and DISTINCT ON, GROUP
// BY with every aggregate family, inner and
// left joins grouped by either side, joins of three tables (star and chain,
// inner and left, grouped by any of them), semi- and anti-joins (EXISTS,
// NOT EXISTS, IN), set operations (UNION ALL, UNION, INTERSECT, EXCEPT),
// chains over each kind of target,
// partitioned sources; and, from difftest_everyday_test.go, HAVING, SELECT
// DISTINCT, aggregates without GROUP BY, comma joins and USING; from
// difftest_setopover_test.go, statements over a UNION ALL in a CTE or
// derived table; from difftest_forms_test.go, UNION ALL of aggregating
// branches, parenthesized joins, statements over UNION, INTERSECT and
// EXCEPT with or without ALL, and aggregates over the nullable keys of
// the first two); from difftest_nullreaders_test.go, UNION ALL of joined
// aggregating and plain branches, and projections, joins, GROUP BY,
// top-k and DISTINCT ON reading a target whose key may be NULL), over
// columns of many types, driven by random DML
// (multi-row statements, key changes, NULLs, TRUNCATE, rollbacks) while the
// workers' connections are killed at random. After convergence every target
// must equal its recompute, compared for identity: the text form of every
// row, both ways (EXCEPT ALL in each direction).
//
// go test -run TestDifferential runs a short fixed-seed run; -long runs
// cases until -long-for has passed, printing the seed to replay one with
// -seed. Every divergence found becomes a named seed in
// testdata/difftest/regressions.txt, replayed by every run.
var (
	diffLong    = flag.Bool("long", false, "run the differential test for -long-for (10 minutes) instead of a short fixed-seed run")
	diffLongFor = flag.Duration("long-for", 10*time.Minute, "how long -long runs the differential test")
	diffSeed    = flag.Uint64("seed", 0, "replay the differential test from this seed (0: the fixed seed, or a random one with -long)")
)

// gatedFeatures are generator features left out because the fix they need
// has not landed; remove an entry once it has (a run then covers it).
var gatedFeatures = map[string]string{
	// Found 2026-12-02 (TRELLIS_DIFF_FORMS=2 -long, seed 5983289415010359599,
	// not yet reduced): a global count over a GROUP BY reader of a target
	// whose key may be NULL (nrN_r0 grouped by a column of a LEFT JOIN's
	// target) kept count(*) 2 where the recompute has 3.
	"_r0 u SELECT count(*) AS cnt, count(u.gk) AS nk": "global aggregate over a GROUP BY reader of a nullable-key target diverged (seed 5983289415010359599, FORMS=2)",
	"_r1 u SELECT count(*) AS cnt, count(u.gk) AS nk": "global aggregate over a GROUP BY reader of a nullable-key target diverged (seed 5983289415010359599, FORMS=2)",
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if *diffLong {
		// setup's context lasts 5 minutes: a long run needs longer.
		ctx, cancel := context.WithTimeout(context.Background(), *diffLongFor+10*time.Minute)
		t.Cleanup(cancel)
		e.ctx = ctx
	}
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	c := e.connect(trellis.Options{Staging: true, DrainWorkers: 2})
	icu := false
	if err := e.db.QueryRow(e.ctx, `SELECT count(*) > 0 FROM pg_collation WHERE collprovider = 'i'`).Scan(&icu); err != nil || !icu {
		t.Log("no ICU collations: the nondeterministic collation is left out")
	}

	type run struct {
		name  string
		seed  uint64
		cases int
		forms int
	}
	var runs []run
	for _, r := range readRegressions(t) {
		runs = append(runs, run{name: r.name, seed: r.seed, cases: 1, forms: r.forms})
	}
	switch {
	case *diffSeed != 0:
		runs = []run{{name: "replay", seed: *diffSeed, cases: 1}}
	case *diffLong:
		seed := rand.Uint64()
		runs = append(runs, run{name: "long", seed: seed, cases: 1 << 30})
	default:
		runs = append(runs, run{name: "fixed", seed: 20261201, cases: 6})
		// A case whose generated definitions include an aggregate reading
		// a LEFT JOIN's target (nullChainDef, decision 0049).
		runs = append(runs, run{name: "chain_over_outer_join", seed: 20261222, cases: 1})
	}
	deadline := time.Now().Add(*diffLongFor)
	executed := 0
	for _, r := range runs {
		for i := 0; i < r.cases; i++ {
			seed := r.seed + uint64(i)
			if r.name == "long" {
				if time.Now().After(deadline) {
					break
				}
			}
			g := &diffGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), schema: fmt.Sprintf("d%d", executed), icu: icu,
				alt: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)), setops: rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d)),
				outer:     rand.New(rand.NewPCG(seed, seed^0x369dea0f31a53f85)),
				setbranch: rand.New(rand.NewPCG(seed, seed^0x4f1bbcdcbfa53e0b)),
				everyday:  rand.New(rand.NewPCG(seed, seed^0x7c5e2a1d3b9f4e61)),
				winjoin:   rand.New(rand.NewPCG(seed, seed^0x1b873593cc9e2d51)),
				over:      rand.New(rand.NewPCG(seed, seed^0x94d049bb133111eb)),
				setcount:  rand.New(rand.NewPCG(seed, seed^0x2c1b3c6d5e7f8091)),
				nullchain: rand.New(rand.NewPCG(seed, seed^0x2127599bf4325c37)),
				unionagg:  rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc909)),
				paren:     rand.New(rand.NewPCG(seed, seed^0x3c6ef372fe94f82b)),
				overset:   rand.New(rand.NewPCG(seed, seed^0x510e527fade682d1)),
				unionjoin: rand.New(rand.NewPCG(seed, seed^0x9b05688c2b3e6c1f)),
				nullread:  rand.New(rand.NewPCG(seed, seed^0x1f83d9abfb41bd6b)), forms: r.forms}
			t.Logf("differential case %s: seed %d (replay: go test -run TestDifferential -seed %d; a divergence found becomes a line of testdata/difftest/regressions.txt)", r.name, seed, seed)
			runDiffCase(t, e, c, g)
			executed++
		}
	}
	t.Logf("differential: %d generated cases executed", executed)
}

type regression struct {
	name  string
	seed  uint64
	forms int // forms=N: the TRELLIS_DIFF_FORMS the case was found with
}

// readRegressions reads testdata/difftest/regressions.txt: "name seed"
// lines, a "forms=N" after the seed when the case was found with
// TRELLIS_DIFF_FORMS=N; # comments.
func readRegressions(t *testing.T) []regression {
	f, err := os.Open(filepath.Join("testdata", "difftest", "regressions.txt"))
	require.NoError(t, err)
	defer f.Close()
	var out []regression
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		require.True(t, len(f) == 2 || len(f) == 3, "regressions.txt: %q is not \"name seed [forms=N]\"", line)
		n, err := strconv.ParseUint(f[1], 10, 64)
		require.NoError(t, err, line)
		r := regression{name: f[0], seed: n}
		if len(f) == 3 {
			v, ok := strings.CutPrefix(f[2], "forms=")
			require.True(t, ok, "regressions.txt: %q: the third field is forms=N", line)
			r.forms, err = strconv.Atoi(v)
			require.NoError(t, err, line)
		}
		out = append(out, r)
	}
	require.NoError(t, sc.Err())
	return out
}

// diffGen generates one case: tables, definitions and DML.
type diffGen struct {
	r *rand.Rand
	// alt draws how a definition is written (a derived table or CTE for
	// the same query): a stream of its own, so a seed of
	// regressions.txt still generates the case it found.
	alt    *rand.Rand
	schema string
	icu    bool
	nextID int
	// setops draws the set operations that replace some projections: a
	// stream of its own too; setbranch which of their branches join a
	// second table (or filter by a subquery of one), another.
	setops    *rand.Rand
	setbranch *rand.Rand
	// outer draws the RIGHT and FULL JOINs after the second table that
	// replace some joins of three tables (decision 0039): its own stream.
	outer *rand.Rand
	// everyday draws the definitions of everydayDef added to each case
	// (HAVING, DISTINCT, aggregates without GROUP BY, comma joins, USING).
	everyday *rand.Rand
	// winjoin draws the windows, top-k and DISTINCT ON over joins that
	// replace some joins (decision 0045): its own stream too.
	winjoin *rand.Rand
	// over draws the definition of overDef added to each case (a
	// statement over a UNION ALL in a CTE or derived table).
	over *rand.Rand
	// setcount draws whether a tree of set operations keeps duplicates
	// by count (INTERSECT ALL, EXCEPT ALL; decision 0050): its own stream.
	setcount *rand.Rand
	// nullchain draws the readers of outer joins' targets, whose key may
	// be NULL (decision 0049): its own stream too.
	nullchain *rand.Rand
	// unionagg, paren and overset draw the definitions of
	// difftest_forms_test.go added to each case (a UNION ALL of
	// aggregating branches, a parenthesized join, a statement over a set
	// operation other than UNION ALL), each from a stream of its own.
	unionagg, paren, overset *rand.Rand
	// unionjoin and nullread draw the definitions of
	// difftest_nullreaders_test.go added to each case (a UNION ALL of
	// joined aggregating branches and plain ones; readers of a target
	// whose key may be NULL), each from a stream of its own too.
	unionjoin, nullread *rand.Rand
	// forms is how many of those to add (0: formsDefs()): a line of
	// regressions.txt found with TRELLIS_DIFF_FORMS says it.
	forms int
}

func (g *diffGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g *diffGen) chance(p float64) bool    { return g.r.Float64() < p }

// diffDef is one generated definition and the query that recomputes it:
// both select the same outputs, in order, so their rows compare as text.
type diffDef struct {
	name, stmt string
	cols       []string // target columns compared, in order
	recompute  string   // the same outputs from the sources
	kind       string   // projection, group, join (for chains)
}

func (g *diffGen) q(name string) string { return g.schema + "." + name }

func (g *diffGen) ddl() []string {
	ci := "text"
	if g.icu {
		ci = "text COLLATE " + g.q("ci")
	}
	out := []string{
		"CREATE SCHEMA " + g.schema,
		"CREATE TYPE " + g.q("mood") + " AS ENUM ('sad', 'ok', 'happy')",
		"CREATE DOMAIN " + g.q("posint") + " AS int CHECK (VALUE > 0)",
	}
	if g.icu {
		out = append(out, "CREATE COLLATION "+g.q("ci")+" (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
	}
	return append(out,
		"CREATE TABLE "+g.q("a")+" (id int PRIMARY KEY, g int, k text COLLATE \"C\", ci "+ci+", n numeric, n2 numeric(10,2), f float8, j jsonb, js json, ts timestamptz, arr int[], e "+g.q("mood")+", d "+g.q("posint")+")",
		"CREATE TABLE "+g.q("b")+" (id int PRIMARY KEY, aid int, w int, label text)",
		"CREATE INDEX ON "+g.q("b")+" (aid)",
		// Views read as sources (decision 0028): their queries are inlined.
		"CREATE VIEW "+g.q("av")+" AS SELECT * FROM "+g.q("a"),
		"CREATE VIEW "+g.q("bv")+" AS SELECT id, aid, w, label FROM "+g.q("b"),
		"CREATE TABLE "+g.q("c")+" (id int PRIMARY KEY, w int, tag text COLLATE \"C\")",
		"CREATE INDEX ON "+g.q("c")+" (w)",
		"CREATE TABLE "+g.q("p")+" (id int, part int, v int, s text, PRIMARY KEY (id, part)) PARTITION BY LIST (part)",
		"CREATE TABLE "+g.q("p0")+" PARTITION OF "+g.q("p")+" FOR VALUES IN (0)",
		"CREATE TABLE "+g.q("p1")+" PARTITION OF "+g.q("p")+" FOR VALUES IN (1)",
		"CREATE TABLE "+g.q("p2")+" PARTITION OF "+g.q("p")+" DEFAULT",
	)
}

// Values, as SQL literals, with the edge cases of each type.
func (g *diffGen) val(col string) string {
	if g.chance(0.1) && col != "part" {
		return "NULL"
	}
	switch col {
	case "g", "w", "v":
		return strconv.Itoa(g.r.IntN(6) - 1)
	case "k", "ci", "label", "s", "tag":
		return g.pick("'alice'", "'Alice'", "'bob'", "'BOB'", "'carol'", "''")
	case "n":
		return g.pick("10.5", "10.50", "2", "2.000", "-1.25", "0", "0.0")
	case "n2":
		return g.pick("1.5", "2", "-3.25", "0")
	case "f":
		return g.pick("0", "'-0'", "'NaN'", "1.5", "-2.25", "'Infinity'")
	case "j":
		return g.pick(`'{"x": 1}'`, `'{"x": 1.0}'`, `'{"x": "a", "y": [1, 2]}'`, `'[]'`, `'{"y": null}'`)
	case "js":
		return g.pick(`'{"x": 1}'`, `'{"x" : 1}'`, `'[1,2]'`)
	case "ts":
		return g.pick("'2024-01-01 00:00:00+00'", "'2024-01-01 01:00:00+01'", "'2024-06-01 12:00:00+00'", "'2023-12-31 23:59:59.5+00'")
	case "arr":
		return g.pick("'{}'", "'{1,2}'", "'{2,1}'", "'{NULL}'", "'{3}'")
	case "e":
		return g.pick("'sad'", "'ok'", "'happy'")
	case "d":
		return g.pick("1", "2", "3")
	case "aid":
		return strconv.Itoa(g.r.IntN(40))
	case "part":
		return strconv.Itoa(g.r.IntN(4))
	}
	panic("no values for " + col)
}

var aCols = []string{"g", "k", "ci", "n", "n2", "f", "j", "js", "ts", "arr", "e", "d"}

func (g *diffGen) insert(table string, n int) string {
	var cols []string
	switch table {
	case "a":
		cols = aCols
	case "b":
		cols = []string{"aid", "w", "label"}
	case "c":
		cols = []string{"w", "tag"}
	case "p":
		cols = []string{"part", "v", "s"}
	}
	var rows []string
	for i := 0; i < n; i++ {
		g.nextID++
		vals := []string{strconv.Itoa(g.nextID)}
		for _, c := range cols {
			vals = append(vals, g.val(c))
		}
		rows = append(rows, "("+strings.Join(vals, ", ")+")")
	}
	return fmt.Sprintf("INSERT INTO %s (id, %s) VALUES %s", g.q(table), strings.Join(cols, ", "), strings.Join(rows, ", "))
}

// dml is one random statement.
func (g *diffGen) dml() string {
	table := g.pick("a", "a", "a", "b", "b", "c", "p")
	cols := map[string][]string{"a": aCols, "b": {"aid", "w", "label"}, "c": {"w", "tag"}, "p": {"v", "s", "part"}}[table]
	where := fmt.Sprintf("id %% %d = %d", 2+g.r.IntN(5), g.r.IntN(2))
	switch x := g.r.IntN(100); {
	case x < 35:
		return g.insert(table, 1+g.r.IntN(8))
	case x < 70:
		col := cols[g.r.IntN(len(cols))]
		return fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s", g.q(table), col, g.val(col), where)
	case x < 78:
		// Key changes: the row moves to a new key.
		g.nextID += 1000
		return fmt.Sprintf("UPDATE %s SET id = id + %d WHERE %s", g.q(table), g.nextID, where)
	case x < 92:
		return fmt.Sprintf("DELETE FROM %s WHERE %s", g.q(table), where)
	case x < 95:
		return "TRUNCATE " + g.q(table)
	default:
		return "BEGIN; " + g.insert(table, 3) + fmt.Sprintf("; DELETE FROM %s WHERE %s; ROLLBACK", g.q(table), where)
	}
}

// The expressions a projection may select, with names.
func (g *diffGen) projExprs(alias string) [][2]string {
	all := [][2]string{
		{"g", "%s.g"}, {"k", "%s.k"}, {"ci", "%s.ci"}, {"n", "%s.n"}, {"n2", "%s.n2"}, {"f", "%s.f"},
		{"j", "%s.j"}, {"js", "%s.js"}, {"ts", "%s.ts"}, {"arr", "%s.arr"}, {"e", "%s.e"}, {"d", "%s.d"},
		{"g1", "%s.g + 1"}, {"kx", "%s.k || '!'"}, {"n_2", "%s.n * 2"}, {"jx", "%s.j -> 'x'"},
		{"arr0", "%s.arr || 0"}, {"dd", "coalesce(%s.d, 0)"}, {"up", "upper(%s.ci)"},
	}
	g.r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	out := all[:2+g.r.IntN(4)]
	for i := range out {
		out[i][1] = strings.ReplaceAll(out[i][1], "%s", alias)
	}
	return out
}

func (g *diffGen) wherePred(alias string) string {
	return strings.ReplaceAll(g.pick("", "%s.g > 1", "%s.g IS NULL", "%s.k <> 'bob'", "%s.n >= 2", "%s.e <> 'sad'", "%s.f > 0", "%s.d IS NOT NULL"), "%s", alias)
}

// Group keys whose equality is identity (grouping 2 and 2.000, or alice
// and Alice under a case-insensitive collation, shows either member, so
// the recompute itself would not be deterministic).
func (g *diffGen) groupKey(alias string) string {
	return strings.ReplaceAll(g.pick("%s.g", "%s.k", "%s.e", "%s.d", "%s.g % 2", "%s.arr", "%s.j ->> 'x'", "%s.ts"), "%s", alias)
}

// Aggregates of every family whose result is deterministic.
func (g *diffGen) aggregates(a string) [][2]string {
	all := [][2]string{
		{"cnt", "count(*)"}, {"cnt_k", "count(%s.k)"}, {"sum_g", "sum(%s.g)"}, {"sum_n", "sum(%s.n)"}, {"avg_n", "avg(%s.n)"},
		{"min_k", "min(%s.k)"}, {"max_ts", "max(%s.ts)"}, {"agg_k", "string_agg(%s.k, ',' ORDER BY %s.k, %s.id)"},
		{"arr_g", "array_agg(%s.g ORDER BY %s.id)"}, {"all_pos", "bool_and(%s.g > 0)"}, {"any_f", "bool_or(%s.f > 0)"},
		{"dist_g", "count(DISTINCT %s.g)"}, {"min_e", "min(%s.e)"}, {"max_d", "max(%s.d)"}, {"sum_n2", "sum(%s.n2)"},
		{"jagg", "jsonb_agg(%s.j ORDER BY %s.id)"}, {"cnt_js", "count(%s.js)"},
	}
	g.r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	out := all[:1+g.r.IntN(5)]
	for i := range out {
		out[i][1] = strings.ReplaceAll(out[i][1], "%s", a)
	}
	return out
}

// prefixed puts p before each name.
func prefixed(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}

func selectList(items [][2]string) (sel, names, exprs []string) {
	for _, it := range items {
		sel = append(sel, it[1]+" AS "+it[0])
		names = append(names, it[0])
		exprs = append(exprs, it[1])
	}
	return
}

func (g *diffGen) def(i int, prior []diffDef) diffDef {
	name := fmt.Sprintf("t%d", i)
	var d diffDef
	d.name = g.q(name)
	where := func(p string) string {
		if p == "" {
			return ""
		}
		return " WHERE " + p
	}
	shape := g.pick("projection", "group", "join", "joingroup", "join3", "join3group", "semi", "partition", "chain")
	if shape == "chain" && len(prior) == 0 {
		shape = "projection"
	}
	switch shape {
	case "projection":
		items := g.projExprs("a")
		sel, names, exprs := selectList(items)
		w := g.wherePred("a")
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a SELECT %s%s", d.name, g.q("a"), strings.Join(sel, ", "), where(w))
		switch g.alt.IntN(4) {
		case 0: // the filter inside a derived table
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM (SELECT * FROM %s%s) a SELECT %s", d.name, g.q("a"), where(strings.ReplaceAll(w, "a.", "")), strings.Join(sel, ", "))
		case 2: // through a view of the table
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a SELECT %s%s", d.name, g.q("av"), strings.Join(sel, ", "), where(w))
		case 1: // the outputs computed by a CTE, read by name
			d.stmt = fmt.Sprintf("TRANSFORM %s WITH x AS (SELECT a.id, %s FROM %s a) FROM x y SELECT %s%s", d.name, strings.Join(sel, ", "),
				g.q("a"), strings.Join(prefixed("y.", names), ", "), where(strings.ReplaceAll(w, "a.", "y.")))
			if w != "" && !slices.Contains(exprs, strings.TrimSpace(strings.Fields(w)[0])) {
				// the filter reads a column the CTE does not output
				d.stmt = fmt.Sprintf("TRANSFORM %s WITH x AS (SELECT a.id, %s FROM %s a%s) FROM x y SELECT %s", d.name, strings.Join(sel, ", "),
					g.q("a"), where(w), strings.Join(prefixed("y.", names), ", "))
			}
		}
		d.cols = append([]string{"id"}, names...)
		d.recompute = fmt.Sprintf("SELECT a.id, %s FROM %s a%s", strings.Join(exprs, ", "), g.q("a"), where(w))
		d.kind = "projection"
		if g.alt.IntN(3) == 0 {
			// A window, top-k or DISTINCT ON over a instead, drawn from
			// the alt stream, so the main stream stays as it was.
			d = g.windowDef(d.name)
		} else if g.setops != nil && g.setops.IntN(3) == 0 {
			// A set operation instead, from a stream of its own, so the
			// main and alt streams stay as they were.
			d = g.setOpDef(d.name)
		}
	case "group":
		key := g.groupKey("a")
		aggs := g.aggregates("a")
		sel, names, exprs := selectList(aggs)
		w := g.wherePred("a")
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a SELECT %s AS gk, %s%s GROUP BY %s", d.name, g.q("a"), key, strings.Join(sel, ", "), where(w), key)
		if g.alt.IntN(3) == 0 {
			// the aggregate in a derived table, its groups selected outside
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM (SELECT %s AS gk, %s FROM %s a%s GROUP BY %s) s SELECT s.gk, %s", d.name, key, strings.Join(sel, ", "),
				g.q("a"), where(w), key, strings.Join(prefixed("s.", names), ", "))
		}
		d.cols = append([]string{"gk"}, names...)
		d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s a%s GROUP BY %s", key, strings.Join(exprs, ", "), g.q("a"), where(w), key)
		d.kind = "group"
	case "join", "joingroup":
		join := g.pick("JOIN", "LEFT JOIN")
		from := fmt.Sprintf("%s a %s %s b ON a.id = b.aid", g.q("a"), join, g.q("b"))
		if join == "LEFT JOIN" && g.alt.IntN(2) == 0 {
			// the same join written as a RIGHT JOIN (the alt stream keeps
			// the main one as it was)
			from = fmt.Sprintf("%s b RIGHT JOIN %s a ON a.id = b.aid", g.q("b"), g.q("a"))
		} else if join == "JOIN" && shape == "join" && g.alt.IntN(2) == 0 {
			// a FULL JOIN: b's rows without an a (aid NULL or dangling)
			// are kept too
			join = "FULL JOIN"
			from = fmt.Sprintf("%s a FULL JOIN %s b ON a.id = b.aid", g.q("a"), g.q("b"))
		}
		if shape == "join" {
			items := append(g.projExprs("a")[:1], [2]string{"bw", "b.w"}, [2]string{"bl", "b.label"})
			sel, names, exprs := selectList(items)
			w := g.pick("", "b.w > 0", "a.g > 1")
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT a.id AS a_id0, b.id AS b_id0, %s%s", d.name, from, strings.Join(sel, ", "), where(w))
			switch g.alt.IntN(3) {
			case 0: // the joined table through a derived table of its columns
				d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a %s (SELECT id, aid, w, label FROM %s) b ON a.id = b.aid SELECT a.id AS a_id0, b.id AS b_id0, %s%s",
					d.name, g.q("a"), join, g.q("b"), strings.Join(sel, ", "), where(w))
			case 1: // the joined table through a view
				d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a %s %s b ON a.id = b.aid SELECT a.id AS a_id0, b.id AS b_id0, %s%s",
					d.name, g.q("a"), join, g.q("bv"), strings.Join(sel, ", "), where(w))
			}
			d.cols = append([]string{"a_id0", "b_id0"}, names...)
			d.recompute = fmt.Sprintf("SELECT a.id, b.id, %s FROM %s%s", strings.Join(exprs, ", "), from, where(w))
			d.kind = "join"
			if join != "JOIN" {
				d.kind = "leftjoin"
			}
		} else {
			key := g.pick("a.g", "a.k", "b.w", "b.label", "a.e")
			aggs := [][2]string{{"cnt", "count(*)"}, {"nb", "count(b.id)"}, {"sw", "sum(b.w)"}, {"ks", "string_agg(a.k, ',' ORDER BY a.k, a.id, b.id)"}}
			aggs = aggs[:1+g.r.IntN(len(aggs))]
			sel, names, exprs := selectList(aggs)
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s AS gk, %s GROUP BY %s", d.name, from, key, strings.Join(sel, ", "), key)
			d.cols = append([]string{"gk"}, names...)
			d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s GROUP BY %s", key, strings.Join(exprs, ", "), from, key)
			d.kind = "group"
		}
		if g.winjoin != nil && g.winjoin.IntN(3) == 0 {
			d = g.windowJoinDef(d.name)
		} else if g.winjoin != nil && g.winjoin.IntN(3) == 0 {
			d = g.fullUsingDef(d.name)
		}
	case "join3", "join3group":
		// A chain (c joins b) or a star (c joins a), each join inner or
		// left; c's w is not its key, so rows match many to many.
		j1, j2 := g.pick("JOIN", "LEFT JOIN"), g.pick("JOIN", "LEFT JOIN")
		on := g.pick("c.w = b.w", "c.w = a.g")
		from := fmt.Sprintf("%s a %s %s b ON a.id = b.aid %s %s c ON %s", g.q("a"), j1, g.q("b"), j2, g.q("c"), on)
		if j1 == "LEFT JOIN" && g.alt.IntN(2) == 0 {
			from = fmt.Sprintf("%s b RIGHT JOIN %s a ON a.id = b.aid %s %s c ON %s", g.q("b"), g.q("a"), j2, g.q("c"), on)
		} else if j1 == "JOIN" && shape == "join3" && g.alt.IntN(2) == 0 {
			// a FULL JOIN of a and b, c joined after it to either
			j1 = "FULL JOIN"
			from = fmt.Sprintf("%s a FULL JOIN %s b ON a.id = b.aid %s %s c ON %s", g.q("a"), g.q("b"), j2, g.q("c"), on)
		}
		if g.outer.IntN(2) == 0 {
			// c joined with a RIGHT or FULL JOIN after the join of a and
			// b (of any kind): any of the tables may be a row's first, and
			// any may be missing from a group's rows
			j2 = []string{"RIGHT JOIN", "FULL JOIN"}[g.outer.IntN(2)]
			from = fmt.Sprintf("%s a %s %s b ON a.id = b.aid %s %s c ON %s", g.q("a"), j1, g.q("b"), j2, g.q("c"), on)
		}
		if shape == "join3" {
			items := append(g.projExprs("a")[:1], [2]string{"bw", "b.w"}, [2]string{"ct", "c.tag"})
			sel, names, exprs := selectList(items)
			w := g.pick("", "b.w > 0", "a.g > 1", "c.tag <> 'bob'")
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT a.id AS a_id0, b.id AS b_id0, c.id AS c_id0, %s%s", d.name, from, strings.Join(sel, ", "), where(w))
			d.cols = append([]string{"a_id0", "b_id0", "c_id0"}, names...)
			d.recompute = fmt.Sprintf("SELECT a.id, b.id, c.id, %s FROM %s%s", strings.Join(exprs, ", "), from, where(w))
			d.kind = "join3"
			if j1 != "JOIN" || j2 != "JOIN" {
				d.kind = "leftjoin"
			}
		} else {
			key := g.pick("a.g", "a.k", "b.w", "b.label", "c.tag", "c.w")
			aggs := [][2]string{{"cnt", "count(*)"}, {"nc", "count(c.id)"}, {"sw", "sum(b.w)"}, {"ts", "string_agg(c.tag, ',' ORDER BY c.tag, a.id, b.id, c.id)"}}
			aggs = aggs[:1+g.r.IntN(len(aggs))]
			sel, names, exprs := selectList(aggs)
			w := g.pick("", " WHERE a.g > 0", " WHERE c.tag IS NOT NULL")
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s AS gk, %s%s GROUP BY %s", d.name, from, key, strings.Join(sel, ", "), w, key)
			d.cols = append([]string{"gk"}, names...)
			d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s%s GROUP BY %s", key, strings.Join(exprs, ", "), from, w, key)
			d.kind = "group"
		}
		if g.winjoin != nil && g.winjoin.IntN(3) == 0 {
			d = g.windowJoinDef(d.name)
		}
	case "semi":
		// A semi- or anti-join of a with b (through b's non-key aid) or c
		// (many to many), over a projection or a GROUP BY.
		sub := g.pick(
			"EXISTS (SELECT 1 FROM %s b WHERE b.aid = a.id)", "NOT EXISTS (SELECT 1 FROM %s b WHERE b.aid = a.id AND b.w > 0)",
			"EXISTS (SELECT FROM %s c WHERE c.w = a.g AND c.tag <> 'bob')", "NOT EXISTS (SELECT 1 FROM %s c WHERE c.w = a.g)",
			"a.g IN (SELECT c.w FROM %s c WHERE c.tag IS NOT NULL)")
		table := g.q("b")
		if strings.Contains(sub, " c ") {
			table = g.q("c")
		}
		w := strings.ReplaceAll(sub, "%s", table)
		if g.chance(0.5) {
			items := g.projExprs("a")
			sel, names, exprs := selectList(items)
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a SELECT %s WHERE %s", d.name, g.q("a"), strings.Join(sel, ", "), w)
			d.cols = append([]string{"id"}, names...)
			d.recompute = fmt.Sprintf("SELECT a.id, %s FROM %s a WHERE %s", strings.Join(exprs, ", "), g.q("a"), w)
			d.kind = "projection"
		} else {
			key := g.groupKey("a")
			aggs := g.aggregates("a")
			sel, names, exprs := selectList(aggs)
			from := g.q("a") + " a"
			if g.outer.IntN(2) == 0 {
				// over a FULL JOIN: a may be missing, its group NULL, and
				// the subquery correlated with a table a row may lack
				from = fmt.Sprintf("%s a FULL JOIN %s fb ON fb.aid = a.id", g.q("a"), g.q("b"))
			}
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s AS gk, %s WHERE %s GROUP BY %s", d.name, from, key, strings.Join(sel, ", "), w, key)
			d.cols = append([]string{"gk"}, names...)
			d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s GROUP BY %s", key, strings.Join(exprs, ", "), from, w, key)
			d.kind = "group"
		}
	case "partition":
		if g.chance(0.5) {
			w := g.pick("", "p.v > 1", "p.s <> 'bob'")
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s p SELECT p.v AS v, p.s AS s%s", d.name, g.q("p"), where(w))
			d.cols = []string{"id", "part", "v", "s"}
			d.recompute = fmt.Sprintf("SELECT p.id, p.part, p.v, p.s FROM %s p%s", g.q("p"), where(w))
			d.kind = "projection"
		} else {
			key := g.pick("p.part", "p.s", "p.v")
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s p SELECT %s AS gk, count(*) AS cnt, sum(p.v) AS sv GROUP BY %s", d.name, g.q("p"), key, key)
			d.cols = []string{"gk", "cnt", "sv"}
			d.recompute = fmt.Sprintf("SELECT %s, count(*), sum(p.v) FROM %s p GROUP BY %s", key, g.q("p"), key)
			d.kind = "group"
		}
	case "chain":
		if nd, ok := g.nullChainDef(d.name, prior); ok {
			return nd
		}
		var readable []diffDef
		for _, p := range prior {
			// Chains over chains are left out: the generator does not
			// track a chain's key columns.
			if p.kind != "leftjoin" && p.kind != "chain" && p.kind != "window" && p.kind != "setop" {
				readable = append(readable, p)
			}
		}
		if len(readable) == 0 {
			return g.def(i, nil)
		}
		up := readable[g.r.IntN(len(readable))]
		col := up.cols[len(up.cols)-1]
		if g.chance(0.5) || up.kind == "group" {
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s u SELECT u.%s AS c", d.name, up.name, col)
			keys := map[string][]string{"projection": {"id"}, "join": {"a_id0", "b_id0"}, "join3": {"a_id0", "b_id0", "c_id0"}, "group": {"gk"}}[up.kind]
			if slices.Contains(up.cols, "part") {
				keys = []string{"id", "part"}
			}
			d.cols = append(slices.Clone(keys), "c")
			d.recompute = fmt.Sprintf("SELECT %s, u.%s FROM %s u", "u."+strings.Join(keys, ", u."), col, up.name)
		} else {
			gcol := up.cols[0]
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s u SELECT u.%s AS gk, count(*) AS cnt GROUP BY u.%s", d.name, up.name, gcol, gcol)
			d.cols = []string{"gk", "cnt"}
			d.recompute = fmt.Sprintf("SELECT u.%s, count(*) FROM %s u GROUP BY u.%s", gcol, up.name, gcol)
		}
		d.kind = "chain"
	}
	return d
}

// nullChainDef draws, from the nullchain stream only, half the time when
// an outer join's target was defined before, an aggregate reading it
// grouped by its second key column (NULL where the outer join left its
// table out), or globally: a chain over a key that may be NULL (decision
// 0049). Its recompute reads the upstream's target, itself compared with
// its own recompute.
func (g *diffGen) nullChainDef(name string, prior []diffDef) (diffDef, bool) {
	if g.nullchain == nil || g.nullchain.IntN(2) == 0 {
		return diffDef{}, false
	}
	var outer []diffDef
	for _, p := range prior {
		if p.kind == "leftjoin" && len(p.cols) > 2 {
			outer = append(outer, p)
		}
	}
	if len(outer) == 0 {
		return diffDef{}, false
	}
	up := outer[g.nullchain.IntN(len(outer))]
	key, last := up.cols[1], up.cols[len(up.cols)-1]
	d := diffDef{name: name, kind: "chain"}
	if g.nullchain.IntN(4) == 0 {
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s u SELECT count(*) AS cnt, count(u.%s) AS nk", name, up.name, key)
		d.cols = []string{"cnt", "nk"}
		d.recompute = fmt.Sprintf("SELECT count(*), count(u.%s) FROM %s u", key, up.name)
		return d, true
	}
	d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s u SELECT u.%s AS gk, count(*) AS cnt, count(u.%s) AS nl GROUP BY u.%s", name, up.name, key, last, key)
	d.cols = []string{"gk", "cnt", "nl"}
	d.recompute = fmt.Sprintf("SELECT u.%s, count(*), count(u.%s) FROM %s u GROUP BY u.%s", key, last, up.name, key)
	return d, true
}

// windowDef draws, from the alt stream only, a window transform over a:
// window functions over a partition or the whole table, top-k per
// partition over a derived table, DISTINCT ON, or a global ORDER BY ...
// LIMIT. Each window's result is deterministic, so the target must equal
// its recompute exactly.
func (g *diffGen) windowDef(name string) diffDef {
	pick := func(xs ...string) string { return xs[g.alt.IntN(len(xs))] }
	part := pick("a.g", "a.k", "a.ci", "a.n", "a.e", "a.d", "lower(a.k)")
	w := pick("", " WHERE a.g > 0", " WHERE a.k IS NOT NULL")
	d := diffDef{name: name, kind: "window"}
	switch pick("window", "whole", "topk", "distincton", "limit") {
	case "window", "whole":
		over := "PARTITION BY " + part
		if g.alt.IntN(3) == 0 {
			over = ""
		}
		fns := [][2]string{
			{"w_sum", "sum(a.n) OVER (%s)"}, {"w_cnt", "count(*) OVER (%s)"}, {"w_rank", "rank() OVER (%s ORDER BY a.g)"},
			{"w_rn", "row_number() OVER (%s ORDER BY a.k, a.id)"}, {"w_max", "max(a.ts) OVER (%s ORDER BY a.n2 RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"},
			{"w_lag", "lag(a.k) OVER (%s ORDER BY a.g, a.id)"}, {"w_dr", "dense_rank() OVER (%s ORDER BY a.ci)"},
		}
		g.alt.Shuffle(len(fns), func(i, j int) { fns[i], fns[j] = fns[j], fns[i] })
		fns = fns[:1+g.alt.IntN(3)]
		var sel, exprs []string
		for _, f := range fns {
			e := fmt.Sprintf(f[1], over)
			sel, exprs = append(sel, e+" AS "+f[0]), append(exprs, e)
			d.cols = append(d.cols, f[0])
		}
		if over == "" {
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a SELECT a.id, %s%s", name, g.q("a"), strings.Join(sel, ", "), w)
			d.cols = append([]string{"id"}, d.cols...)
			d.recompute = fmt.Sprintf("SELECT a.id, %s FROM %s a%s", strings.Join(exprs, ", "), g.q("a"), w)
		} else {
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a SELECT a.id, %s AS pk, %s%s", name, g.q("a"), part, strings.Join(sel, ", "), w)
			d.cols = append([]string{"pk", "id"}, d.cols...)
			d.recompute = fmt.Sprintf("SELECT %s, a.id, %s FROM %s a%s", part, strings.Join(exprs, ", "), g.q("a"), w)
		}
	case "topk":
		k := 1 + g.alt.IntN(3)
		inner := fmt.Sprintf("SELECT a.id, %s AS pk, a.n, %s() OVER (PARTITION BY %s ORDER BY a.n DESC NULLS LAST, a.id) AS rn FROM %s a%s",
			part, pick("row_number", "rank", "dense_rank"), part, g.q("a"), w)
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM (%s) s SELECT * WHERE rn <= %d", name, inner, k)
		d.cols = []string{"pk", "id", "n", "rn"}
		d.recompute = fmt.Sprintf("SELECT pk, id, n, rn FROM (%s) s WHERE rn <= %d", inner, k)
	case "distincton":
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a SELECT DISTINCT ON (%s) %s AS pk, a.id AS best, a.n%s ORDER BY %s, a.n DESC, a.id",
			name, g.q("a"), part, part, w, part)
		d.cols = []string{"pk", "best", "n"}
		d.recompute = fmt.Sprintf("SELECT DISTINCT ON (%s) %s, a.id, a.n FROM %s a%s ORDER BY %s, a.n DESC, a.id", part, part, g.q("a"), w, part)
	default:
		k := 1 + g.alt.IntN(5)
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s a SELECT a.id, a.n, a.k%s ORDER BY a.n DESC NULLS LAST, a.id LIMIT %d", name, g.q("a"), w, k)
		d.cols = []string{"id", "n", "k"}
		d.recompute = fmt.Sprintf("SELECT a.id, a.n, a.k FROM %s a%s ORDER BY a.n DESC NULLS LAST, a.id LIMIT %d", g.q("a"), w, k)
	}
	return d
}

// windowJoinDef draws, from the winjoin stream only, a window, a top-k per
// partition (over a derived table), a DISTINCT ON or a global ORDER BY ...
// LIMIT over a join of a and b, or of a, b and c, in any mix of inner,
// LEFT, RIGHT and FULL joins (decision 0045), partitioned by a column of
// any of the tables. No joined table matches on its key, so the rows' key
// is every table's (a_id0, b_id0, c_id0), the tie-breaker of every order.
func (g *diffGen) windowJoinDef(name string) diffDef {
	r := g.winjoin
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	a, b, c := g.q("a"), g.q("b"), g.q("c")
	from := pick(
		fmt.Sprintf("%s a JOIN %s b ON b.aid = a.id", a, b),
		fmt.Sprintf("%s a LEFT JOIN %s b ON b.aid = a.id", a, b),
		fmt.Sprintf("%s a FULL JOIN %s b ON b.aid = a.id", a, b),
		fmt.Sprintf("%s b RIGHT JOIN %s a ON b.aid = a.id", b, a),
		fmt.Sprintf("%s a JOIN %s b ON b.aid = a.id LEFT JOIN %s c ON c.w = b.w", a, b, c),
		fmt.Sprintf("%s a LEFT JOIN %s b ON b.aid = a.id JOIN %s c ON c.w = a.g", a, b, c),
		fmt.Sprintf("%s a JOIN %s b ON b.aid = a.id FULL JOIN %s c ON c.w = b.w", a, b, c),
	)
	ids, keys := []string{"a.id AS a_id0", "b.id AS b_id0"}, []string{"a_id0", "b_id0"}
	order := "a.id, b.id"
	parts := []string{"a.g", "a.k", "a.e", "b.w", "b.label"}
	if strings.Contains(from, " c ON ") {
		ids, keys, order = append(ids, "c.id AS c_id0"), append(keys, "c_id0"), order+", c.id"
		parts = append(parts, "c.tag", "c.w")
	}
	part := pick(parts...)
	w := pick("", " WHERE a.g > 0", " WHERE b.w IS NOT NULL", " WHERE a.k <> 'bob'")
	idList, idExprs := strings.Join(ids, ", "), strings.ReplaceAll(strings.ReplaceAll(strings.Join(ids, ", "), " AS a_id0", ""), " AS b_id0", "")
	idExprs = strings.ReplaceAll(idExprs, " AS c_id0", "")
	d := diffDef{name: name, kind: "window"}
	switch pick("window", "whole", "topk", "distincton", "limit") {
	case "window", "whole":
		over := "PARTITION BY " + part
		if r.IntN(4) == 0 {
			over = ""
		}
		fns := [][2]string{
			{"w_sum", "sum(b.w) OVER (%s)"}, {"w_cnt", "count(*) OVER (%s)"}, {"w_rank", "rank() OVER (%s ORDER BY a.g)"},
			{"w_rn", "row_number() OVER (%s ORDER BY a.k, " + order + ")"}, {"w_max", "max(a.g) OVER (%s)"},
			{"w_lag", "lag(b.label) OVER (%s ORDER BY b.w, " + order + ")"}, {"w_dr", "dense_rank() OVER (%s ORDER BY b.w)"},
		}
		r.Shuffle(len(fns), func(i, j int) { fns[i], fns[j] = fns[j], fns[i] })
		fns = fns[:1+r.IntN(3)]
		var sel, exprs, names []string
		for _, f := range fns {
			e := fmt.Sprintf(f[1], over)
			sel, exprs, names = append(sel, e+" AS "+f[0]), append(exprs, e), append(names, f[0])
		}
		if over == "" {
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s, %s%s", name, from, idList, strings.Join(sel, ", "), w)
			d.cols = append(slices.Clone(keys), names...)
			d.recompute = fmt.Sprintf("SELECT %s, %s FROM %s%s", idExprs, strings.Join(exprs, ", "), from, w)
		} else {
			d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s, %s AS pk, %s%s", name, from, idList, part, strings.Join(sel, ", "), w)
			d.cols = append(append([]string{"pk"}, keys...), names...)
			d.recompute = fmt.Sprintf("SELECT %s, %s, %s FROM %s%s", part, idExprs, strings.Join(exprs, ", "), from, w)
		}
	case "topk":
		k := 1 + r.IntN(3)
		inner := fmt.Sprintf("SELECT %s, %s AS pk, a.n, %s() OVER (PARTITION BY %s ORDER BY a.n DESC NULLS LAST, %s) AS rn FROM %s%s",
			idList, part, pick("row_number", "rank", "dense_rank"), part, order, from, w)
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM (%s) s SELECT * WHERE rn <= %d", name, inner, k)
		d.cols = append(append([]string{"pk"}, keys...), "n", "rn")
		d.recompute = fmt.Sprintf("SELECT %s FROM (%s) s WHERE rn <= %d", strings.Join(d.cols, ", "), inner, k)
	case "distincton":
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT DISTINCT ON (%s) %s AS pk, a.id AS best, b.w AS bw%s ORDER BY %s, a.n DESC, %s",
			name, from, part, part, w, part, order)
		d.cols = []string{"pk", "best", "bw"}
		d.recompute = fmt.Sprintf("SELECT DISTINCT ON (%s) %s, a.id, b.w FROM %s%s ORDER BY %s, a.n DESC, %s", part, part, from, w, part, order)
	default:
		k := 1 + r.IntN(6)
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT %s, a.n, b.label AS bl%s ORDER BY a.n DESC NULLS LAST, %s LIMIT %d", name, from, idList, w, order, k)
		d.cols = append(slices.Clone(keys), "n", "bl")
		d.recompute = fmt.Sprintf("SELECT %s, a.n, b.label FROM %s%s ORDER BY a.n DESC NULLS LAST, %s LIMIT %d", idExprs, from, w, order, k)
	}
	return d
}

// fullUsingDef draws, from the winjoin stream only, a FULL JOIN with
// USING (decision 0045): b and c on w (many to many, NULLs on either
// side) or a and b on id, the merged column selected unqualified and
// filtered on; PostgreSQL's own FULL JOIN ... USING is the recompute.
func (g *diffGen) fullUsingDef(name string) diffDef {
	r := g.winjoin
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	d := diffDef{name: name, kind: "leftjoin"}
	if r.IntN(2) == 0 {
		from := fmt.Sprintf("%s b FULL JOIN %s c USING (w)", g.q("b"), g.q("c"))
		w := pick("", " WHERE w > 0", " WHERE w IS NULL OR b.label <> 'bob'")
		d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT b.id AS b_id0, c.id AS c_id0, w, b.label AS bl, c.tag AS ct%s", name, from, w)
		d.cols = []string{"b_id0", "c_id0", "w", "bl", "ct"}
		d.recompute = fmt.Sprintf("SELECT b.id, c.id, w, b.label, c.tag FROM %s%s", from, w)
		return d
	}
	from := fmt.Sprintf("%s a FULL JOIN %s b USING (id)", g.q("a"), g.q("b"))
	w := pick("", " WHERE id % 2 = 0", " WHERE a.g > 0 OR b.w > 0")
	d.stmt = fmt.Sprintf("TRANSFORM %s FROM %s SELECT id, a.k, b.label%s", name, from, w)
	d.cols = []string{"a_id", "b_id", "id", "k", "label"}
	d.recompute = fmt.Sprintf("SELECT a.id, b.id, id, a.k, b.label FROM %s%s", from, w)
	return d
}

// setOpDef draws, from the setops stream only, a set operation over a, b
// and c (a read twice sometimes): UNION ALL, keyed by the branch and each
// table's key (selected as id, or added as <alias>_id), or a tree of
// UNION, INTERSECT and EXCEPT keyed by the whole row. The outputs are an
// int and a "C" text, whose equality is identity.
func (g *diffGen) setOpDef(name string) diffDef {
	r := g.setops
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	type branch struct{ table, alias, x, y, where string }
	all := []branch{
		{"a", "a", pick("a.g", "a.g % 3", "coalesce(a.d, 0)"), pick("a.k", "a.ci COLLATE \"C\"", "upper(a.k)"), pick("", "a.g > 1", "a.k <> 'bob'", "a.e <> 'sad'")},
		{"b", "b", pick("b.w", "b.aid % 4"), pick("b.label COLLATE \"C\"", "lower(b.label) COLLATE \"C\""), pick("", "b.w > 0", "b.label IS NOT NULL")},
		{"c", "c", pick("c.w", "c.w - 1"), "c.tag", pick("", "c.w < 3")},
		{"a", "a2", pick("a2.g", "a2.d"), pick("a2.k", "lower(a2.k)"), pick("", "a2.g IS NULL", "a2.n >= 2")},
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	bs := all[:2+r.IntN(2)]
	where := func(w string) string {
		if w == "" {
			return ""
		}
		return " WHERE " + w
	}
	var d diffDef
	d.name = name
	d.kind = "setop"
	distinct := r.IntN(2) != 0
	// Some branches join a second table (alias j<n>, its key a column
	// j<n>_id of a UNION ALL's key) or filter by a subquery of one, drawn
	// from the setbranch stream so the setops stream stays as it was.
	joined := make([]bool, len(bs))
	if jr := g.setbranch; jr != nil {
		for i := range bs {
			b := &bs[i]
			if jr.IntN(2) == 0 {
				continue
			}
			j := fmt.Sprintf("j%d", i+1)
			and := func(cond string) {
				if b.where == "" {
					b.where = cond
				} else {
					b.where = "(" + b.where + ") AND " + cond
				}
			}
			kind := jr.IntN(4)
			switch {
			case kind == 0 && b.table == "a":
				and(fmt.Sprintf("EXISTS (SELECT 1 FROM %s %s WHERE %s.aid = %s.id AND %s.w > 0)", g.q("b"), j, j, b.alias, j))
			case kind == 0 && b.table == "b":
				and(fmt.Sprintf("%s.aid IN (SELECT %s.id FROM %s %s WHERE %s.g > 1)", b.alias, j, g.q("a"), j, j))
			case kind == 0:
				and(fmt.Sprintf("NOT EXISTS (SELECT 1 FROM %s %s WHERE %s.g = %s.w)", g.q("a"), j, j, b.alias))
			case b.table == "a":
				b.alias += " " + pick("JOIN", "LEFT JOIN") + " " + g.q("b") + " " + j + " ON " + j + ".aid = " + b.alias + ".id"
				joined[i] = true
			case b.table == "b" && kind == 1 && distinct:
				// The outputs read the joined table, which a LEFT JOIN may
				// leave out: its NULL-extended row comes and goes.
				b.x, b.y = j+".g", j+".k"
				b.alias += " LEFT JOIN " + g.q("a") + " " + j + " ON " + j + ".id = b.aid"
				joined[i] = true
			case b.table == "b":
				b.alias += " " + pick("JOIN", "LEFT JOIN") + " " + g.q("c") + " " + j + " ON " + j + ".w = b.w"
				joined[i] = true
			default:
				b.alias += " LEFT JOIN " + g.q("b") + " " + j + " ON " + j + ".w = c.w"
				joined[i] = true
			}
		}
	}
	// alias is a branch's table alias (its FROM text after the table may
	// go on with a JOIN).
	alias := func(b branch) string { a, _, _ := strings.Cut(b.alias, " "); return a }
	if !distinct {
		// UNION ALL; the key selected as id in every branch, or added.
		withID := r.IntN(2) == 0
		var stmt, rec []string
		d.cols = []string{"branch"}
		if withID {
			d.cols = append(d.cols, "id")
		} else {
			for _, b := range bs {
				d.cols = append(d.cols, alias(b)+"_id")
			}
		}
		for i := range bs {
			if joined[i] {
				d.cols = append(d.cols, fmt.Sprintf("j%d_id", i+1))
			}
		}
		d.cols = append(d.cols, "x", "y")
		for i, b := range bs {
			sel := fmt.Sprintf("%s AS x, %s AS y", b.x, b.y)
			recSel := fmt.Sprintf("%d::smallint", i+1)
			if withID {
				sel = alias(b) + ".id, " + sel
				recSel += ", " + alias(b) + ".id"
			} else {
				for j, o := range bs {
					if j == i {
						recSel += ", " + alias(b) + ".id"
					} else {
						recSel += fmt.Sprintf(", NULL::int AS %s_id", alias(o))
					}
				}
			}
			for j := range bs {
				switch {
				case !joined[j]:
				case j == i:
					recSel += fmt.Sprintf(", j%d.id", j+1)
				default:
					recSel += ", NULL::int"
				}
			}
			recSel += fmt.Sprintf(", %s, %s", b.x, b.y)
			if i == 0 {
				stmt = append(stmt, fmt.Sprintf("TRANSFORM %s FROM %s %s SELECT %s%s", name, g.q(b.table), b.alias, sel, where(b.where)))
			} else {
				stmt = append(stmt, fmt.Sprintf("SELECT %s FROM %s %s%s", sel, g.q(b.table), b.alias, where(b.where)))
			}
			rec = append(rec, fmt.Sprintf("SELECT %s FROM %s %s%s", recSel, g.q(b.table), b.alias, where(b.where)))
		}
		d.stmt = strings.Join(stmt, " UNION ALL ")
		d.recompute = strings.Join(rec, " UNION ALL ")
		return d
	}
	// A tree of set operations without ALL (SQL precedence), or, drawn
	// from the setcount stream, with ALL on every operator: counted, keyed
	// by the row and its copy's ordinal (a tree of UNION ALLs alone is the
	// branch-keyed shape above, so it stays without ALL).
	ops := make([]string, len(bs))
	for i := 1; i < len(bs); i++ {
		ops[i] = pick("UNION", "INTERSECT", "EXCEPT")
	}
	counted := g.setcount != nil && g.setcount.IntN(3) != 0 && slices.ContainsFunc(ops, func(o string) bool { return o != "" && o != "UNION" })
	var stmt, rec strings.Builder
	for i, b := range bs {
		if i > 0 {
			op := " " + ops[i] + " "
			if counted {
				op = " " + ops[i] + " ALL "
			}
			stmt.WriteString(op)
			rec.WriteString(op)
		}
		sel := fmt.Sprintf("%s AS x, %s AS y", b.x, b.y)
		if i == 0 {
			fmt.Fprintf(&stmt, "TRANSFORM %s FROM %s %s SELECT %s%s", name, g.q(b.table), b.alias, sel, where(b.where))
		} else {
			fmt.Fprintf(&stmt, "SELECT %s FROM %s %s%s", sel, g.q(b.table), b.alias, where(b.where))
		}
		fmt.Fprintf(&rec, "SELECT %s FROM %s %s%s", sel, g.q(b.table), b.alias, where(b.where))
	}
	d.stmt, d.recompute = stmt.String(), rec.String()
	d.cols = []string{"x", "y"}
	if counted {
		d.recompute = "SELECT x, y, row_number() OVER (PARTITION BY x, y) AS ordinal FROM (" + d.recompute + ") AS q"
		d.cols = append(d.cols, "ordinal")
	}
	return d
}

// gated reports the gated feature a definition uses, if any.
func gated(d diffDef) string {
	for f, why := range gatedFeatures {
		if strings.Contains(d.stmt, f) {
			return why
		}
	}
	return ""
}

func runDiffCase(t *testing.T, e *env, c *trellis.Client, g *diffGen) {
	for _, s := range g.ddl() {
		e.exec(s)
	}
	for _, tbl := range []string{"a", "b", "c", "p"} {
		e.exec(g.insert(tbl, 15+g.r.IntN(15)))
	}
	var defs []diffDef
	n := 3 + g.r.IntN(4)
	for i := 0; len(defs) < n && i < 3*n; i++ {
		d := g.def(i, defs)
		if why := gated(d); why != "" {
			continue
		}
		if _, err := c.Define(e.ctx, d.stmt); err != nil {
			// A definition Trellis refuses is no divergence, but say which.
			t.Logf("refused: %s: %v", d.stmt, err)
			continue
		}
		if os.Getenv("TRELLIS_DIFF_VERBOSE") != "" {
			t.Logf("defined: %s", d.stmt)
		}
		defs = append(defs, d)
	}
	if g.setops != nil {
		// One set operation per case, from its own stream.
		d := g.setOpDef(g.q("s0"))
		if _, err := c.Define(e.ctx, d.stmt); err != nil {
			t.Logf("refused: %s: %v", d.stmt, err)
		} else {
			if os.Getenv("TRELLIS_DIFF_VERBOSE") != "" {
				t.Logf("defined: %s", d.stmt)
			}
			defs = append(defs, d)
		}
	}
	if g.everyday != nil {
		// The everyday forms, from their own stream: each is accepted, so
		// a refusal is a failure.
		for i, n := 0, everydayDefs(); i < n; i++ {
			d := g.everydayDef(g.q(fmt.Sprintf("e%d", i)))
			_, err := c.Define(e.ctx, d.stmt)
			require.NoError(t, err, d.stmt)
			if os.Getenv("TRELLIS_DIFF_VERBOSE") != "" {
				t.Logf("defined: %s", d.stmt)
			}
			defs = append(defs, d)
		}
	}
	if g.over != nil {
		// A statement over a UNION ALL, from its own stream: accepted, so
		// a refusal is a failure.
		d := g.overDef(g.q("o0"))
		_, err := c.Define(e.ctx, d.stmt)
		require.NoError(t, err, d.stmt)
		if os.Getenv("TRELLIS_DIFF_VERBOSE") != "" {
			t.Logf("defined: %s", d.stmt)
		}
		defs = append(defs, d)
	}
	nforms := g.forms
	if nforms == 0 {
		nforms = formsDefs()
	}
	for i := 0; i < nforms; i++ {
		// The forms of difftest_forms_test.go, each from its own stream:
		// accepted, so a refusal is a failure.
		var forms []diffDef
		if g.unionagg != nil {
			forms = append(forms, g.groupedUnionDef(g.q(fmt.Sprintf("u%d", i)))...)
		}
		if g.paren != nil {
			forms = append(forms, g.parenJoinDef(g.q(fmt.Sprintf("pj%d", i)))...)
		}
		if g.overset != nil {
			forms = append(forms, g.overSetDef(g.q(fmt.Sprintf("os%d", i))))
		}
		if g.unionjoin != nil {
			forms = append(forms, g.joinedUnionDef(g.q(fmt.Sprintf("uj%d", i)))...)
		}
		if g.nullread != nil {
			forms = append(forms, g.nullKeyReadersDef(g.q(fmt.Sprintf("nr%d", i)))...)
		}
		for _, d := range forms {
			if why := gated(d); why != "" {
				continue
			}
			_, err := c.Define(e.ctx, d.stmt)
			require.NoError(t, err, d.stmt)
			if os.Getenv("TRELLIS_DIFF_VERBOSE") != "" {
				t.Logf("defined: %s", d.stmt)
			}
			defs = append(defs, d)
		}
	}
	require.NotEmpty(t, defs)
	defer func() {
		for i := len(defs) - 1; i >= 0; i-- {
			_, _ = c.Apply(e.ctx, "DROP TRANSFORM "+defs[i].name)
		}
	}()
	for _, d := range defs {
		e.waitStatus(c, d.name, func(st *trellis.Status) bool {
			return st.State == trellis.StateLive || st.State == trellis.StatePaused
		})
	}
	rounds := 3 + g.r.IntN(3)
	for round := 0; round < rounds; round++ {
		for i, k := 0, 4+g.r.IntN(10); i < k; i++ {
			stmt := g.dml()
			if os.Getenv("TRELLIS_DIFF_VERBOSE") != "" {
				t.Logf("round %d: %s", round, stmt)
			}
			if _, err := e.db.Exec(e.ctx, stmt); err != nil {
				// Generated statements can clash with a constraint (a key
				// moved onto another); the row stays as it was.
				t.Logf("statement refused: %s: %v", stmt, err)
			}
			if g.chance(0.08) {
				// A drain (or staging) worker dies mid-page.
				e.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'trellis worker' AND datname = current_database() AND pid <> pg_backend_pid()`)
			}
		}
		convergeRetrying(e, c)
		for _, d := range defs {
			st, err := c.Status(e.ctx, d.name)
			require.NoError(t, err)
			if st.State != trellis.StateLive {
				// A transform that stopped says why; that is not silently wrong.
				require.NotEmpty(t, st.PausedReason+fmt.Sprint(st.Correcting), "%s is %s with no reason", d.name, st.State)
				if st.State == trellis.StateBackfilling {
					e.waitState(c, d.name, trellis.StateLive)
					convergeRetrying(e, c)
				} else {
					if os.Getenv("TRELLIS_DIFF_VERBOSE") != "" {
						t.Logf("not compared: %s is %s: %s", d.name, st.State, st.PausedReason)
					}
					continue
				}
			}
			if st.HeldKeys != nil {
				if os.Getenv("TRELLIS_DIFF_VERBOSE") != "" {
					t.Logf("not compared: %s holds keys", d.name)
				}
				continue // held keys are reported, not applied
			}
			e.assertDiffIdentical(d)
		}
	}
}

// convergeRetrying waits for convergence; a call on a connection a kill
// cut fails once, and is retried.
func convergeRetrying(e *env, c *trellis.Client) {
	e.t.Helper()
	var err error
	for i := 0; i < 5; i++ {
		var tok trellis.Watermark
		if tok, err = c.WatermarkToken(e.ctx); err == nil {
			if err = c.AwaitConverged(e.ctx, tok, 25*time.Second); err == nil {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Say what holds convergence up: every transform's state and failures.
	var why []string
	defs, derr := c.Definitions(e.ctx)
	for _, d := range defs {
		if st, serr := c.Status(e.ctx, d.Target); serr == nil && st != nil {
			line := fmt.Sprintf("%s: %s pending %d", st.Target, st.State, st.PendingChanges)
			if st.DrainFailure != nil {
				line += fmt.Sprintf(", drain failure after %d attempts: %s", st.DrainFailure.Attempts, st.DrainFailure.Error)
			}
			if st.PausedReason != "" {
				line += ", paused: " + st.PausedReason
			}
			why = append(why, line)
		}
	}
	require.NoError(e.t, err, "definitions (%v):\n%s", derr, strings.Join(why, "\n"))
}

// assertIdentical compares a target with its recompute by the text form
// of each row, both ways.
func (e *env) assertDiffIdentical(d diffDef) {
	e.t.Helper()
	var tc []string
	for _, c := range d.cols {
		tc = append(tc, "t."+c)
	}
	tgt := fmt.Sprintf("SELECT ROW(%s)::text AS r FROM %s t", strings.Join(tc, ", "), d.name)
	rec := fmt.Sprintf("SELECT ROW(x.*)::text AS r FROM (%s) x", d.recompute)
	q := fmt.Sprintf(`SELECT (SELECT count(*) FROM (%[1]s EXCEPT ALL %[2]s) a), (SELECT count(*) FROM (%[2]s EXCEPT ALL %[1]s) b)`, rec, tgt)
	var missing, extra int
	require.NoError(e.t, e.db.QueryRow(e.ctx, q).Scan(&missing, &extra), q)
	if os.Getenv("TRELLIS_DIFF_VERBOSE") != "" {
		e.t.Logf("compared: %s, %s rows", d.name, e.rows("SELECT count(*) FROM " + d.name)[0][0])
	}
	if missing > 0 || extra > 0 {
		lacks := e.rows(fmt.Sprintf("%s EXCEPT ALL %s LIMIT 5", rec, tgt))
		has := e.rows(fmt.Sprintf("%s EXCEPT ALL %s LIMIT 5", tgt, rec))
		e.t.Fatalf("%s diverged from its recompute\n  definition: %s\n  lacks %d rows, e.g. %v\n  has %d extra, e.g. %v", d.name, d.stmt, missing, lacks, extra, has)
	}
}
