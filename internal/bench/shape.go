package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/trellis-pg/trellis/internal/backoff"
)

// The shapes of transform Options.Shape accepts.
const (
	// Projection: TRANSFORM bench_tgt FROM bench_src SELECT v AS v.
	Projection = "projection"
	// GroupBy: bench_src(id, grp, v, filler), grp = id % 10,000, indexed;
	// TRANSFORM bench_tgt FROM bench_src SELECT grp AS grp, sum(v) AS
	// total, count(*) AS n GROUP BY grp.
	GroupBy = "groupby"
	// Join: bench_customers(id, region) with 10,000 rows and
	// bench_src(id, customer_id, v, filler), customer_id = id % 10,000 + 1,
	// indexed; TRANSFORM bench_tgt FROM bench_src s JOIN bench_customers c
	// ON c.id = s.customer_id SELECT s.id AS id, c.region AS region, s.v AS v.
	Join = "join"
	// Quarantine: a projection with a quarantined column. bench_src(id, v,
	// d, filler), d = 0 on every 1,000th row, 1 elsewhere; TRANSFORM
	// bench_tgt FROM bench_src SELECT v AS v, 100 / d AS r. The build
	// quarantines r; the benchmarks measure the healthy column v.
	Quarantine = "quarantine"
	// Having: the groupby shape's source and definition with HAVING
	// count(*) > 0 (every group passes it).
	Having = "having"
	// Global: the groupby shape's source; TRANSFORM bench_tgt FROM
	// bench_src SELECT sum(v) AS total, count(*) AS n (no GROUP BY: one row,
	// recomputed from every source row).
	Global = "global"
	// Derived: the projection's source; TRANSFORM bench_tgt FROM (SELECT
	// id, v FROM bench_src WHERE v >= 0) s SELECT s.v AS v (a derived
	// table, inlined into the projection it stands for).
	Derived = "derived"
	// CTE: the groupby shape's source; TRANSFORM bench_tgt WITH per AS
	// (SELECT grp, sum(v) AS total, count(*) AS n FROM bench_src GROUP BY
	// grp) FROM per SELECT grp, total, n (inlined into the GROUP BY).
	CTE = "cte"
	// View: the projection's source and bench_view AS SELECT id, v FROM
	// bench_src WHERE v >= 0; TRANSFORM bench_tgt FROM bench_view SELECT v
	// AS v (the view's query inlined into the projection it stands for).
	View = "view"
	// Window: the groupby shape's source; TRANSFORM bench_tgt FROM
	// bench_src SELECT grp, v, sum(v) OVER (PARTITION BY grp) AS total
	// (keyed by grp then id; a change recomputes its partition, 100 rows
	// at 1M rows).
	Window = "window"
	// TopK: the groupby shape's source; TRANSFORM bench_tgt FROM (SELECT
	// id, grp, v, row_number() OVER (PARTITION BY grp ORDER BY v DESC, id)
	// AS rn FROM bench_src) s SELECT * WHERE rn <= 3 (the top 3 of each
	// group).
	TopK = "topk"
	// DistinctOn: the groupby shape's source; TRANSFORM bench_tgt FROM
	// bench_src SELECT DISTINCT ON (grp) grp, id AS best, v ORDER BY grp,
	// v DESC, id (the top row of each group).
	DistinctOn = "distincton"
	// Join3: a star of three tables. bench_regions(id, name) with 50 rows,
	// bench_customers(id, region_id, region) with 10,000 and the join's
	// bench_src; TRANSFORM bench_tgt FROM bench_src s JOIN bench_customers c
	// ON c.id = s.customer_id JOIN bench_regions r ON r.id = c.region_id
	// SELECT s.id AS id, r.name AS region, s.v AS v.
	Join3 = "join3"
	// Semi: the join's tables; TRANSFORM bench_tgt FROM bench_src s SELECT
	// s.v AS v WHERE EXISTS (SELECT 1 FROM bench_customers c WHERE c.id =
	// s.customer_id AND c.region <> 'none') (a semi-join: every row has a
	// match).
	Semi = "semi"
	// Union: the projection's source; TRANSFORM bench_tgt FROM bench_src
	// SELECT id, v WHERE v >= 0 UNION ALL SELECT id, v FROM bench_src
	// WHERE v < 0 (keyed by branch, id; every row is in the first branch,
	// and a change recomputes its key in both).
	Union = "union"
	// FullJoin: the join's tables, bench_src's customer_id shifted to
	// 501..11,000, so customers 1..500 have no row of bench_src and the
	// rows of customer_id above 10,000 no customer (about 4.8% of each);
	// TRANSFORM bench_tgt FROM bench_src s FULL JOIN bench_customers c ON
	// c.id = s.customer_id SELECT s.id AS id, c.region AS region, s.v AS v
	// (keyed by id, c_id, either NULL in a row without that side).
	FullJoin = "fulljoin"
	// FullPos: join3's tables, bench_regions with 60 rows (10 without a
	// customer); TRANSFORM bench_tgt FROM bench_src s JOIN bench_customers
	// c ON c.id = s.customer_id RIGHT JOIN bench_regions r ON r.id =
	// c.region_id SELECT s.id AS id, r.name AS region, s.v AS v (a RIGHT
	// JOIN after the second table, decision 0039: keyed by id, c_id, r_id,
	// id and c_id NULL in a region's row without a customer).
	FullPos = "fullpos"
	// UnionDistinct: the projection's source; the union shape's branches
	// with UNION (keyed by the whole row, id and v; ids stay unique, so
	// the benchmarks match rows by id).
	UnionDistinct = "union_distinct"
	// UnionJoin: the join's tables; TRANSFORM bench_tgt FROM bench_src s
	// JOIN bench_customers c ON c.id = s.customer_id SELECT s.id, c.region,
	// s.v WHERE s.v >= 0 UNION ALL SELECT s.id, c.region, s.v FROM bench_src
	// s LEFT JOIN bench_customers c ON c.id = s.customer_id WHERE s.v < 0
	// (branches that join, decision 0040: keyed by branch, id, c_id; every
	// row is in the first branch).
	UnionJoin = "union_join"
)

// Shapes lists every shape; the first is the default.
var Shapes = append([]string{Projection, GroupBy, Join, Quarantine, Having, Global, Derived, CTE, View, Window, TopK, DistinctOn, Join3, Semi, Union, UnionDistinct, FullJoin, UnionJoin, FullPos}, moreShapeNames...)

const (
	shapeGroups    = 10_000 // groups of the groupby shape
	shapeCustomers = 10_000 // rows of bench_customers of the join shape
	shapeRegions   = 50     // distinct regions of bench_customers
)

// shape is what a benchmark needs to know of the transform it maintains.
type shape struct {
	name string
	// definition is the transform's SELECT as plain SQL (%[1]s is
	// bench_src, %[2]s bench_customers, %[3]s bench_view), with the
	// target's columns, key first, as Trellis names them.
	definition string
	keys, vals []string
	// The latency poller reads pollKey and pollVal of the target.
	pollKey, pollVal string
	// pollPrefix are the target's key columns before pollKey, each with
	// its value for a polled key (SQL of p.x, the polled value): the
	// poller finds its rows through the target's unique index, which a
	// search on a later key column alone cannot use (it read the whole
	// 1M-row target of union_join for every poll: 170 ms each).
	pollPrefix [][2]string
	// nullKeys: a key column may be NULL (the target's unique index is
	// NULLS NOT DISTINCT, and rows are matched NULL-safe).
	nullKeys bool
}

// Poll prefixes: the group of a row (grp = id % 10,000), and the first
// branch of a UNION ALL shape (every row of bench_src is in it).
var (
	groupOfID   = [][2]string{{"grp", fmt.Sprintf("p.x %% %d", shapeGroups)}}
	firstBranch = [][2]string{{"branch", "1"}}
)

func shapeOf(name string) shape {
	if m, ok := moreShapes[name]; ok {
		return m.shape
	}
	switch name {
	case GroupBy:
		return shape{
			name:       GroupBy,
			definition: "SELECT grp AS grp, sum(v) AS total, count(*) AS n FROM %[1]s GROUP BY grp",
			keys:       []string{"grp"}, vals: []string{"total", "n"},
			pollKey: "grp", pollVal: "total",
		}
	case CTE:
		return shape{
			name:       CTE,
			definition: "SELECT grp, total, n FROM (SELECT grp, sum(v) AS total, count(*) AS n FROM %[1]s GROUP BY grp) per",
			keys:       []string{"grp"}, vals: []string{"total", "n"},
			pollKey: "grp", pollVal: "total",
		}
	case View:
		return shape{
			name:       View,
			definition: "SELECT id, v FROM %[3]s",
			keys:       []string{"id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v",
		}
	case Derived:
		return shape{
			name:       Derived,
			definition: "SELECT id, v FROM (SELECT id, v FROM %[1]s WHERE v >= 0) s",
			keys:       []string{"id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v",
		}
	case Window:
		return shape{
			name:       Window,
			definition: "SELECT grp, id, v, sum(v) OVER (PARTITION BY grp) AS total FROM %[1]s",
			keys:       []string{"grp", "id"}, vals: []string{"v", "total"},
			pollKey: "id", pollVal: "v", pollPrefix: groupOfID,
		}
	case TopK:
		// Every write raises a row's v above any before: the row becomes
		// its group's first, so the poller finds it by id.
		return shape{
			name:       TopK,
			definition: "SELECT grp, id, v, rn FROM (SELECT id, grp, v, row_number() OVER (PARTITION BY grp ORDER BY v DESC, id) AS rn FROM %[1]s) s WHERE rn <= 3",
			keys:       []string{"grp", "id"}, vals: []string{"v", "rn"},
			pollKey: "id", pollVal: "v", pollPrefix: groupOfID,
		}
	case DistinctOn:
		return shape{
			name:       DistinctOn,
			definition: "SELECT DISTINCT ON (grp) grp, id AS best, v FROM %[1]s ORDER BY grp, v DESC, id",
			keys:       []string{"grp"}, vals: []string{"best", "v"},
			// Polled by group: a later write to another row of the
			// group takes its place as best, so the first write's
			// row may never show; the group's v only grows.
			pollKey: "grp", pollVal: "v",
		}
	case Having:
		return shape{
			name:       Having,
			definition: "SELECT grp AS grp, sum(v) AS total, count(*) AS n FROM %[1]s GROUP BY grp HAVING count(*) > 0",
			keys:       []string{"grp"}, vals: []string{"total", "n"},
			pollKey: "grp", pollVal: "total",
		}
	case Global:
		// No key column: the one row is polled as key 0.
		return shape{
			name:       Global,
			definition: "SELECT sum(v) AS total, count(*) AS n FROM %[1]s",
			vals:       []string{"total", "n"},
			pollKey:    "0::bigint", pollVal: "total",
		}
	case Join:
		return shape{
			name: Join,
			// The target's key is both sides' keys: s.id is selected as
			// id, c.id is added by Trellis as c_id.
			definition: "SELECT s.id AS id, c.id AS c_id, c.region AS region, s.v AS v FROM %[1]s s JOIN %[2]s c ON c.id = s.customer_id",
			keys:       []string{"id", "c_id"}, vals: []string{"region", "v"},
			pollKey: "id", pollVal: "v",
		}
	case FullJoin:
		return shape{
			name:       FullJoin,
			definition: "SELECT s.id AS id, c.id AS c_id, c.region AS region, s.v AS v FROM %[1]s s FULL JOIN %[2]s c ON c.id = s.customer_id",
			keys:       []string{"id", "c_id"}, vals: []string{"region", "v"},
			pollKey: "id", pollVal: "v",
		}
	case FullPos:
		return shape{
			name:       FullPos,
			definition: "SELECT s.id AS id, c.id AS c_id, r.id AS r_id, r.name AS region, s.v AS v FROM %[1]s s JOIN %[2]s c ON c.id = s.customer_id RIGHT JOIN %[4]s r ON r.id = c.region_id",
			keys:       []string{"id", "c_id", "r_id"}, vals: []string{"region", "v"},
			pollKey: "id", pollVal: "v",
		}
	case Join3:
		return shape{
			name:       Join3,
			definition: "SELECT s.id AS id, c.id AS c_id, r.id AS r_id, r.name AS region, s.v AS v FROM %[1]s s JOIN %[2]s c ON c.id = s.customer_id JOIN %[4]s r ON r.id = c.region_id",
			keys:       []string{"id", "c_id", "r_id"}, vals: []string{"region", "v"},
			pollKey: "id", pollVal: "v",
		}
	case Semi:
		return shape{
			name:       Semi,
			definition: "SELECT s.id AS id, s.v AS v FROM %[1]s s WHERE EXISTS (SELECT 1 FROM %[2]s c WHERE c.id = s.customer_id AND c.region <> 'none')",
			keys:       []string{"id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v",
		}
	case Union:
		return shape{
			name:       Union,
			definition: "SELECT 1::smallint AS branch, id, v FROM %[1]s WHERE v >= 0 UNION ALL SELECT 2::smallint, id, v FROM %[1]s WHERE v < 0",
			keys:       []string{"branch", "id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v", pollPrefix: firstBranch,
		}
	case UnionJoin:
		return shape{
			name: UnionJoin,
			definition: "SELECT 1::smallint AS branch, s.id AS id, c.id AS c_id, c.region AS region, s.v AS v FROM %[1]s s JOIN %[2]s c ON c.id = s.customer_id WHERE s.v >= 0" +
				" UNION ALL SELECT 2::smallint, s.id, c.id, c.region, s.v FROM %[1]s s LEFT JOIN %[2]s c ON c.id = s.customer_id WHERE s.v < 0",
			keys: []string{"branch", "id", "c_id"}, vals: []string{"region", "v"},
			pollKey: "id", pollVal: "v", pollPrefix: firstBranch,
		}
	case UnionDistinct:
		return shape{
			name:       UnionDistinct,
			definition: "SELECT id, v FROM %[1]s WHERE v >= 0 UNION SELECT id, v FROM %[1]s WHERE v < 0",
			keys:       []string{"id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v",
		}
	case Quarantine:
		return shape{
			name:       Quarantine,
			definition: "SELECT id, v FROM %[1]s",
			keys:       []string{"id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v",
		}
	default:
		return shape{
			name:       Projection,
			definition: "SELECT id, v FROM %[1]s",
			keys:       []string{"id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v",
		}
	}
}

// transform is the benchmarks' definition of bench_tgt.
func (e *env) transform() string {
	tgt, src, cust := e.table("bench_tgt"), e.table("bench_src"), e.table("bench_customers")
	if m, ok := e.more(); ok {
		return fmt.Sprintf(m.transform, tgt, src, cust, e.table("bench_mid"))
	}
	switch e.shape.name {
	case GroupBy:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT grp AS grp, sum(v) AS total, count(*) AS n GROUP BY grp", tgt, src)
	case Join:
		return fmt.Sprintf("TRANSFORM %s FROM %s s JOIN %s c ON c.id = s.customer_id SELECT s.id AS id, c.region AS region, s.v AS v", tgt, src, cust)
	case FullJoin:
		return fmt.Sprintf("TRANSFORM %s FROM %s s FULL JOIN %s c ON c.id = s.customer_id SELECT s.id AS id, c.region AS region, s.v AS v", tgt, src, cust)
	case Join3:
		return fmt.Sprintf("TRANSFORM %s FROM %s s JOIN %s c ON c.id = s.customer_id JOIN %s r ON r.id = c.region_id SELECT s.id AS id, r.name AS region, s.v AS v",
			tgt, src, cust, e.table("bench_regions"))
	case FullPos:
		return fmt.Sprintf("TRANSFORM %s FROM %s s JOIN %s c ON c.id = s.customer_id RIGHT JOIN %s r ON r.id = c.region_id SELECT s.id AS id, r.name AS region, s.v AS v",
			tgt, src, cust, e.table("bench_regions"))
	case Semi:
		return fmt.Sprintf("TRANSFORM %s FROM %s s SELECT s.v AS v WHERE EXISTS (SELECT 1 FROM %s c WHERE c.id = s.customer_id AND c.region <> 'none')", tgt, src, cust)
	case Quarantine:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT v AS v, 100 / d AS r", tgt, src)
	case Union:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT id, v WHERE v >= 0 UNION ALL SELECT id, v FROM %s WHERE v < 0", tgt, src, src)
	case UnionDistinct:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT id, v WHERE v >= 0 UNION SELECT id, v FROM %s WHERE v < 0", tgt, src, src)
	case UnionJoin:
		return fmt.Sprintf("TRANSFORM %s FROM %s s JOIN %s c ON c.id = s.customer_id SELECT s.id, c.region, s.v WHERE s.v >= 0 UNION ALL SELECT s.id, c.region, s.v FROM %s s LEFT JOIN %s c ON c.id = s.customer_id WHERE s.v < 0",
			tgt, src, cust, src, cust)
	case Having:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT grp, sum(v) AS total, count(*) AS n GROUP BY grp HAVING count(*) > 0", tgt, src)
	case Global:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT sum(v) AS total, count(*) AS n", tgt, src)
	case Derived:
		return fmt.Sprintf("TRANSFORM %s FROM (SELECT id, v FROM %s WHERE v >= 0) s SELECT s.v AS v", tgt, src)
	case View:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT v AS v", tgt, e.table("bench_view"))
	case Window:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT grp, v, sum(v) OVER (PARTITION BY grp) AS total", tgt, src)
	case TopK:
		return fmt.Sprintf("TRANSFORM %s FROM (SELECT id, grp, v, row_number() OVER (PARTITION BY grp ORDER BY v DESC, id) AS rn FROM %s) s SELECT * WHERE rn <= 3", tgt, src)
	case DistinctOn:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT DISTINCT ON (grp) grp, id AS best, v ORDER BY grp, v DESC, id", tgt, src)
	case CTE:
		return fmt.Sprintf("TRANSFORM %s WITH per AS (SELECT grp, sum(v) AS total, count(*) AS n FROM %s GROUP BY grp) FROM per SELECT grp, total, n", tgt, src)
	default:
		return fmt.Sprintf("TRANSFORM %s FROM %s SELECT v AS v", tgt, src)
	}
}

// transforms are the benchmark's TRANSFORM statements in the order they
// are defined: a chain's upstream (bench_mid), then bench_tgt's.
func (e *env) transforms() []string {
	if m, ok := e.more(); ok && m.upstream != "" {
		return []string{fmt.Sprintf(m.upstream, e.table("bench_mid"), e.table("bench_src"), e.table("bench_customers")), e.transform()}
	}
	return []string{e.transform()}
}

// definition is the transform's query as plain SQL.
func (e *env) definition() string {
	return fmt.Sprintf(e.shape.definition, e.table("bench_src"), e.table("bench_customers"), e.table("bench_view"), e.table("bench_regions"))
}

// keyTarget is the shape's key as a unique index or ON CONFLICT names it,
// as Trellis keys its target: its columns, or (true) for a global
// aggregate's one row.
func (e *env) keyTarget() string {
	if len(e.shape.keys) == 0 {
		return "((true))"
	}
	return "(" + strings.Join(e.shape.keys, ", ") + ")"
}

// keyIndex creates table's unique index on the shape's key, as Trellis
// keys its target: NULLS NOT DISTINCT for the full join, either of whose
// keys may be NULL.
func (e *env) keyIndex(table string) string {
	if m, ok := e.more(); ok && m.rowKeyed {
		cols := append(append([]string{}, e.shape.keys...), e.shape.vals...)
		return fmt.Sprintf("CREATE UNIQUE INDEX ON %s (%s)", table, strings.Join(cols, ", "))
	}
	nulls := ""
	if e.shape.name == FullJoin || e.shape.name == UnionJoin || e.shape.name == FullPos || e.shape.nullKeys {
		nulls = " NULLS NOT DISTINCT"
	}
	return fmt.Sprintf("CREATE UNIQUE INDEX ON %s %s%s", table, e.keyTarget(), nulls)
}

// createSource creates the shape's source tables, vacuumed and analysed:
// bench_src with rows rows (ids 1..rows, v 0) and, for the join shapes,
// bench_customers with 10,000 rows (and bench_regions). The indexes the
// transform needs beyond the primary keys are the ones SourceIndexGaps
// lists, created by running its fixes, as a user who follows it does:
// the transforms are defined on the empty tables first (probeIndexGaps),
// and their gaps' fixes run once the rows are in.
func (e *env) createSource(ctx context.Context, rows int) error {
	begin := time.Now()
	src, cust := e.table("bench_src"), e.table("bench_customers")
	// tables are created empty, with their keys; load fills them.
	var tables, load []string
	analyze := []string{src}
	switch e.sourceShape() {
	case GroupBy, Having, Global, CTE, Window, TopK, DistinctOn:
		tables = []string{fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, grp int NOT NULL, v int, filler text)", src)}
		load = []string{fmt.Sprintf("INSERT INTO %s SELECT g, g %% %d, 0, repeat('x', %d) FROM generate_series(1, %d) g", src, shapeGroups, fillerWidth, rows)}
	case Join, Join3, Semi, FullJoin, UnionJoin, FullPos:
		customer := fmt.Sprintf("g %% %d + 1", shapeCustomers)
		if e.shape.name == FullJoin {
			customer = fmt.Sprintf("g %% %d + 501", shapeCustomers+500)
		}
		tables = []string{
			fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, region text, region_id int)", cust),
			fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, customer_id int NOT NULL, v int, filler text)", src),
		}
		load = []string{
			fmt.Sprintf("INSERT INTO %s SELECT g, 'region ' || (g %% %d), g %% %d FROM generate_series(1, %d) g", cust, shapeRegions, shapeRegions, shapeCustomers),
			fmt.Sprintf("INSERT INTO %s SELECT g, %s, 0, repeat('x', %d) FROM generate_series(1, %d) g", src, customer, fillerWidth, rows),
		}
		analyze = append(analyze, cust)
		if e.shape.name == Join3 || e.shape.name == FullPos {
			regions := e.table("bench_regions")
			n := shapeRegions
			if e.shape.name == FullPos {
				n += 10 // regions without a customer: rows of the RIGHT JOIN alone
			}
			tables = append(tables, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, name text)", regions))
			load = append(load, fmt.Sprintf("INSERT INTO %s SELECT g, 'region ' || g FROM generate_series(0, %d) g", regions, n-1))
			analyze = append(analyze, regions)
		}
	case Quarantine:
		tables = []string{fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, v int NOT NULL, d int NOT NULL, filler text)", src)}
		load = []string{fmt.Sprintf("INSERT INTO %s SELECT g, 0, (g %% 1000 <> 0)::int, repeat('x', %d) FROM generate_series(1, %d) g", src, fillerWidth, rows)}
	default:
		tables = []string{fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, v int NOT NULL, filler text)", src)}
		load = []string{fmt.Sprintf("INSERT INTO %s SELECT g, 0, repeat('x', %d) FROM generate_series(1, %d) g", src, fillerWidth, rows)}
		if e.shape.name == View {
			tables = append(tables, fmt.Sprintf("CREATE VIEW %s AS SELECT id, v FROM %s WHERE v >= 0", e.table("bench_view"), src))
		}
	}
	if m, ok := e.more(); ok && m.load != "" {
		load = append(load, fmt.Sprintf(m.load, src, cust))
	}
	for _, q := range tables {
		if err := e.exec(ctx, q); err != nil {
			return err
		}
	}
	fixes, err := e.probeIndexGaps(ctx)
	if err != nil {
		return err
	}
	for _, q := range load {
		if err := e.exec(ctx, q); err != nil {
			return err
		}
	}
	for _, q := range fixes {
		if err := e.exec(ctx, q); err != nil {
			return fmt.Errorf("running a fix SourceIndexGaps listed: %w", err)
		}
	}
	if len(fixes) > 0 {
		e.logf("ran the fixes SourceIndexGaps lists on the sources: %s", strings.Join(fixes, " "))
	}
	for _, t := range analyze {
		if err := e.exec(ctx, "VACUUM (ANALYZE) "+t); err != nil {
			return err
		}
	}
	e.checkpoint(ctx)
	e.logf("created %s (%s shape) with %d rows in %s", src, e.shape.name, rows, time.Since(begin).Round(time.Millisecond))
	return nil
}

// probeIndexGaps defines the benchmark's transforms on its empty source
// tables, reads the SourceIndexGaps of each, drops them again and returns
// the fixes of the gaps on source tables (a gap on a target, as a
// chain's on its upstream's, is fixed once that target exists: define).
func (e *env) probeIndexGaps(ctx context.Context) ([]string, error) {
	c, err := e.connect(ctx, true, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	var defined, fixes []string
	drop := func() error {
		for i := len(defined) - 1; i >= 0; i-- {
			if _, err := c.Apply(ctx, "DROP TRANSFORM "+defined[i]); err != nil {
				return fmt.Errorf("dropping the index-gap probe %s: %w", defined[i], err)
			}
		}
		return nil
	}
	targets := map[string]bool{}
	for _, stmt := range e.transforms() {
		target, err := c.Define(ctx, stmt)
		if err != nil {
			_ = drop()
			return nil, fmt.Errorf("defining (on the empty sources, for their index gaps): %w", err)
		}
		defined = append(defined, target)
		targets[target] = true
		if err := waitLive(ctx, c, target); err != nil {
			_ = drop()
			return nil, err
		}
		st, err := c.Status(ctx, target)
		if err != nil {
			_ = drop()
			return nil, fmt.Errorf("reading the status of %s: %w", target, err)
		}
		for _, g := range st.SourceIndexGaps {
			if !targets[g.Table] && !slices.Contains(fixes, g.Fix) {
				fixes = append(fixes, g.Fix)
			}
		}
	}
	if err := drop(); err != nil {
		return nil, err
	}
	// The staging worker removes capture from the sources after the drop:
	// rows written before it has would be captured, and drained later.
	deadline := time.Now().Add(liveTimeout)
	for {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT t.tgisinternal`, e.schema).Scan(&n); err != nil {
			return nil, err
		}
		if n == 0 {
			return fixes, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("capture of the index-gap probes was not removed from the sources within %s", liveTimeout)
		}
		if !backoff.Sleep(ctx, statusPoll) {
			return nil, ctx.Err()
		}
	}
}

// mismatches counts the rows where the target and the definition's result
// differ (a row missing on either side, or other values).
func (e *env) mismatches(ctx context.Context) (int64, error) {
	return e.mismatchesIn(ctx, e.table("bench_tgt"))
}

// mismatchesIn is mismatches for table, a target or a copy of it.
func (e *env) mismatchesIn(ctx context.Context, table string) (int64, error) {
	var d, t []string
	for _, c := range e.shape.vals {
		d = append(d, "d."+c)
		t = append(t, "t."+c)
	}
	on := "ON true" // a global aggregate: one row each side
	switch {
	case e.shape.name == FullJoin:
		// Either key may be NULL; ids are positive (and hashable so).
		on = "ON coalesce(d.id, -1) = coalesce(t.id, -1) AND coalesce(d.c_id, -1) = coalesce(t.c_id, -1)"
	case e.shape.name == FullPos:
		on = "ON coalesce(d.id, -1) = coalesce(t.id, -1) AND coalesce(d.c_id, -1) = coalesce(t.c_id, -1) AND d.r_id = t.r_id"
	case e.shape.nullKeys:
		var eq []string
		for _, k := range e.shape.keys {
			// FULL JOIN needs a hashable or mergeable condition; the
			// keys are positive ids.
			eq = append(eq, fmt.Sprintf("coalesce(d.%[1]s, -1) = coalesce(t.%[1]s, -1)", k))
		}
		on = "ON " + strings.Join(eq, " AND ")
	case len(e.shape.keys) > 0:
		on = "USING (" + strings.Join(e.shape.keys, ", ") + ")"
	}
	if len(d) == 0 {
		// Keyed by every column (DISTINCT): a row missing on either side.
		d, t = []string{"d." + e.shape.keys[0] + " IS NULL"}, []string{"t." + e.shape.keys[0] + " IS NULL"}
	}
	var n int64
	err := e.pool.QueryRow(ctx, fmt.Sprintf(
		"SELECT count(*) FROM (%s) d FULL JOIN %s t %s WHERE ROW(%s) IS DISTINCT FROM ROW(%s)",
		e.definition(), table, on, strings.Join(d, ", "), strings.Join(t, ", "))).Scan(&n)
	return n, err
}

// prober tracks, for the latency benchmark, the value the target must show
// once a write has reached it. Every write sets v of a row to a value
// larger than any before, so that value, and the total of the row's group,
// only grow.
type prober struct {
	groups bool
	best   bool // distincton: the group's best row, polled by group
	all    bool // topk_global: the target's greatest v, polled as key 0
	global bool // one group of every row, polled as key 0
	// groupOf, when set, is a written row's group (id % 10,000
	// otherwise); false: the group is not polled (skip).
	groupOf func(id int64) (int64, bool)
	rowV    map[int64]int64 // groupby: every written row's v (absent: 0)
	total   map[int64]int64 // groupby: every written group's sum(v)
}

func (e *env) prober() *prober {
	n := e.shape.name
	m, _ := e.more()
	return &prober{groups: n == GroupBy || n == Having || n == Global || n == CTE || m.pollSum, best: n == DistinctOn || m.pollGroup, all: m.pollAll, global: n == Global, groupOf: m.groupOf, rowV: map[int64]int64{}, total: map[int64]int64{}}
}

// wrote records that row id now has v and returns the target key to poll
// and the least value its pollVal column must show.
// polled says whether the poller looks for a write to row id (not when
// its group has no key the poll can name).
func (p *prober) polled(id int64) bool {
	if p.groupOf == nil {
		return true
	}
	_, ok := p.groupOf(id)
	return ok
}

func (p *prober) wrote(id, v int64) (key, want int64) {
	if p.best {
		// v is larger than any value before: the group's best row
		// has at least v once the write has reached the target.
		return id % shapeGroups, v
	}
	if p.all {
		return 0, v
	}
	if !p.groups {
		return id, v
	}
	g := id % shapeGroups
	if p.groupOf != nil {
		g, _ = p.groupOf(id)
	}
	if p.global {
		g = 0
	}
	p.total[g] += v - p.rowV[id]
	p.rowV[id] = v
	return g, p.total[g]
}
