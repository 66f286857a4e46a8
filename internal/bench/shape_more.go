package bench

import (
	"fmt"
	"strings"
)

// Shapes of issue 11's measurement that had no bench shape: SELECT
// DISTINCT, a global top-k, INTERSECT, EXCEPT and an anti-join. Each is
// one entry of moreShapes, whose source is that of an older shape.
const (
	// Distinct: the groupby shape's source; TRANSFORM bench_tgt FROM
	// bench_src SELECT DISTINCT grp, v (keyed by the whole row, grp and v:
	// a changed v is another key; 10,000 rows while every v is 0).
	Distinct = "distinct"
	// TopKGlobal: the projection's source (with the index on (v DESC, id)
	// that SourceIndexGaps asks for);
	// TRANSFORM bench_tgt FROM bench_src SELECT id, v ORDER BY v DESC, id
	// LIMIT 10 (keyed by id; every change recomputes the ten rows).
	TopKGlobal = "topk_global"
	// Intersect: the projection's source; TRANSFORM bench_tgt FROM
	// bench_src SELECT id, v WHERE v >= 0 INTERSECT SELECT id, v FROM
	// bench_src WHERE id > 0 (keyed by the whole row; every row is in both
	// branches).
	Intersect = "intersect"
	// Except: the projection's source; TRANSFORM bench_tgt FROM bench_src
	// SELECT id, v WHERE v >= 0 EXCEPT SELECT id, v FROM bench_src WHERE v
	// < 0 (keyed by the whole row; no row is in the second branch).
	Except = "except"
	// Anti: the join's tables; TRANSFORM bench_tgt FROM bench_src s SELECT
	// s.v AS v WHERE NOT EXISTS (SELECT 1 FROM bench_customers c WHERE c.id
	// = s.customer_id AND c.region = 'none') (an anti-join: no customer's
	// region is 'none', so every row is in the target).
	Anti = "anti"
	// UnionAgg: the groupby shape's source; TRANSFORM bench_tgt WITH u AS
	// (SELECT grp, v FROM bench_src WHERE v >= 0 UNION ALL SELECT grp, v
	// FROM bench_src WHERE v < 0) FROM u SELECT grp, sum(v) AS total,
	// count(*) AS n GROUP BY grp (an aggregate over a UNION ALL in a CTE,
	// decision 0044: keyed by grp; every row is in the first branch, and
	// a group is recomputed from both).
	UnionAgg = "union_agg"
	// UnionGroups: the groupby shape's source; TRANSFORM bench_tgt FROM
	// bench_src SELECT grp, sum(v) AS total, count(*) AS n WHERE v >= 0
	// GROUP BY grp UNION ALL SELECT grp, sum(v), count(*) FROM bench_src
	// WHERE v < 0 GROUP BY grp (a UNION ALL of aggregating branches,
	// decision 0044: keyed by branch, grp; every row is in the first
	// branch's groups).
	UnionGroups = "union_groups"
	// WindowJoin: the join's tables; TRANSFORM bench_tgt FROM bench_src s
	// JOIN bench_customers c ON c.id = s.customer_id SELECT c.id AS cid,
	// s.id AS id, s.v AS v, sum(s.v) OVER (PARTITION BY c.id) AS total (a
	// window over a join partitioned by the joined table, decision 0045:
	// keyed by cid, id; a change recomputes its customer's partition, 100
	// rows at 1M rows).
	WindowJoin = "window_join"
	// IntersectAll: the groupby shape's source;
	// TRANSFORM bench_tgt FROM bench_src SELECT grp, v WHERE v >= 0
	// INTERSECT ALL SELECT grp, v FROM bench_src WHERE id > 0 (decision
	// 0050: keyed by grp, v, ordinal; every row is in both branches, so a
	// value has as many copies as rows, and a change recomputes the
	// copies of its row's old and new values).
	IntersectAll = "intersect_all"
	// UnionValues: the groupby shape's source; TRANSFORM bench_tgt WITH u
	// AS (SELECT grp, v FROM bench_src WHERE v >= 0 UNION SELECT grp, v
	// FROM bench_src WHERE v < 0) FROM u SELECT grp, max(v) AS top,
	// count(*) AS n GROUP BY grp (an aggregate over a UNION without ALL,
	// decision 0050: keyed by grp; a group is recomputed from its rows of
	// both branches grouped by value).
	UnionValues = "union_values"
	// NullChain: the join's tables without customer 2, so 1 row in 10,000
	// (customer_id 2: ids 1, 10,001, ...; the drain's backlog changes id
	// 1) has no customer; bench_mid is TRANSFORM
	// bench_mid FROM bench_src s LEFT JOIN bench_customers c ON c.id =
	// s.customer_id SELECT s.id AS id, c.region AS region, s.v AS v (keyed
	// by id, c_id; c_id NULL in a row without a customer), and TRANSFORM
	// bench_tgt FROM bench_mid m SELECT m.c_id AS cid, sum(m.v) AS total,
	// count(*) AS n GROUP BY m.c_id reads it (a chain over a key that may
	// be NULL, decision 0049: keyed by cid, NULL for the rows without a
	// customer; a change reaches bench_mid's row, then its group).
	NullChain = "null_chain"
)

// nullChainMissing is the customer the null_chain shape's source lacks.
const nullChainMissing = 2

// moreShape is a shape of moreShapes.
type moreShape struct {
	shape
	// source is the older shape whose source tables this one uses.
	source string
	// transform is the TRANSFORM statement (%[1]s bench_tgt, %[2]s
	// bench_src, %[3]s bench_customers).
	transform string
	// load, when set, runs after the source's rows are in (%[1]s
	// bench_src, %[2]s bench_customers).
	load string
	// upstream, when set, is the TRANSFORM statement of the target the
	// transform reads (%[1]s bench_mid, %[2]s bench_src, %[3]s
	// bench_customers), defined first: a chain.
	upstream string
	// rowKeyed: keyed by the whole row, (id, v) or (grp, v): a changed
	// row is another key, so the drain's baseline deletes the rows of the
	// changed ids (or their groups) the definition no longer yields and
	// inserts the new ones; whole: the baseline recomputes the whole
	// target (a global top-k's rows).
	rowKeyed, whole bool
	// pollGroup: the latency poller reads the written row's group, whose
	// rows' greatest v only grows (the written row's old (grp, v) key
	// leaves the target); pollAll: it reads the whole target as key 0.
	pollGroup, pollAll bool
	// pollSum: the latency poller reads the written row's group, whose
	// total is the sum of its rows' v (as the groupby shape's).
	pollSum bool
	// groupOf, when set, is the group pollSum polls for a written row
	// (id % 10,000 otherwise); false: the row's group is not polled.
	groupOf func(id int64) (int64, bool)
	// chained: the drain baseline keeps a copy of the upstream too
	// (chainBaseline).
	chained bool
	// byID, when set, is the definition with the drain baseline's changed
	// ids ($1) in each branch (%[1]s bench_src), as a batch job writes it:
	// PostgreSQL pushes no condition into an EXCEPT, so the definition's
	// result filtered by id recomputes the whole set operation.
	byID string
	// byGroup, when set, is the definition with the drain baseline's
	// changed rows' groups (the CTE g of their grp) in each branch (%[1]s
	// bench_src): PostgreSQL pushes no IN (SELECT ...) into an INTERSECT
	// ALL, so the definition's result filtered by group recomputes the
	// whole 2M-row set operation, over 18 minutes for a 200,000-change
	// backlog at 1M rows (decision 0053).
	byGroup string
	// recompute, when set, is the condition on the definition's rows (d)
	// the drain baseline recomputes for its changed ids ($1; %[1]s
	// bench_src), when it is not those ids' rows: a window's partitions.
	recompute string
}

var moreShapes = map[string]moreShape{
	Distinct: {
		shape: shape{
			name:       Distinct,
			definition: "SELECT DISTINCT grp, v FROM %[1]s",
			keys:       []string{"grp", "v"},
			pollKey:    "grp", pollVal: "v",
		},
		source:    GroupBy,
		transform: "TRANSFORM %[1]s FROM %[2]s SELECT DISTINCT grp, v",
		rowKeyed:  true, pollGroup: true,
	},
	TopKGlobal: {
		shape: shape{
			name:       TopKGlobal,
			definition: "SELECT id, v FROM %[1]s ORDER BY v DESC, id LIMIT 10",
			keys:       []string{"id"}, vals: []string{"v"},
			// Polled as one key, 0: a written row leaves the ten once
			// ten later writes pass it; the greatest v only grows.
			pollKey: "0::bigint", pollVal: "v",
		},
		source:    Projection,
		transform: "TRANSFORM %[1]s FROM %[2]s SELECT id, v ORDER BY v DESC, id LIMIT 10",
		whole:     true, pollAll: true,
	},
	Intersect: {
		shape: shape{
			name:       Intersect,
			definition: "SELECT id, v FROM %[1]s WHERE v >= 0 INTERSECT SELECT id, v FROM %[1]s WHERE id > 0",
			keys:       []string{"id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v",
		},
		source:    Projection,
		transform: "TRANSFORM %[1]s FROM %[2]s SELECT id, v WHERE v >= 0 INTERSECT SELECT id, v FROM %[2]s WHERE id > 0",
		rowKeyed:  true,
	},
	Except: {
		shape: shape{
			name:       Except,
			definition: "SELECT id, v FROM %[1]s WHERE v >= 0 EXCEPT SELECT id, v FROM %[1]s WHERE v < 0",
			keys:       []string{"id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v",
		},
		source:    Projection,
		transform: "TRANSFORM %[1]s FROM %[2]s SELECT id, v WHERE v >= 0 EXCEPT SELECT id, v FROM %[2]s WHERE v < 0",
		rowKeyed:  true,
		byID:      "SELECT id, v FROM %[1]s WHERE v >= 0 AND id = ANY ($1::bigint[]) EXCEPT SELECT id, v FROM %[1]s WHERE v < 0 AND id = ANY ($1::bigint[])",
	},
	Anti: {
		shape: shape{
			name:       Anti,
			definition: "SELECT s.id AS id, s.v AS v FROM %[1]s s WHERE NOT EXISTS (SELECT 1 FROM %[2]s c WHERE c.id = s.customer_id AND c.region = 'none')",
			keys:       []string{"id"}, vals: []string{"v"},
			pollKey: "id", pollVal: "v",
		},
		source:    Join,
		transform: "TRANSFORM %[1]s FROM %[2]s s SELECT s.v AS v WHERE NOT EXISTS (SELECT 1 FROM %[3]s c WHERE c.id = s.customer_id AND c.region = 'none')",
	},
	UnionAgg: {
		shape: shape{
			name:       UnionAgg,
			definition: "SELECT grp, sum(v) AS total, count(*) AS n FROM (SELECT grp, v FROM %[1]s WHERE v >= 0 UNION ALL SELECT grp, v FROM %[1]s WHERE v < 0) u GROUP BY grp",
			keys:       []string{"grp"}, vals: []string{"total", "n"},
			pollKey: "grp", pollVal: "total",
		},
		source:    GroupBy,
		transform: "TRANSFORM %[1]s WITH u AS (SELECT grp, v FROM %[2]s WHERE v >= 0 UNION ALL SELECT grp, v FROM %[2]s WHERE v < 0) FROM u SELECT grp, sum(v) AS total, count(*) AS n GROUP BY grp",
		pollSum:   true,
	},
	UnionGroups: {
		shape: shape{
			name:       UnionGroups,
			definition: "SELECT 1::smallint AS branch, grp, sum(v) AS total, count(*) AS n FROM %[1]s WHERE v >= 0 GROUP BY grp UNION ALL SELECT 2::smallint, grp, sum(v), count(*) FROM %[1]s WHERE v < 0 GROUP BY grp",
			// grp first: the baseline recomputes the changed rows'
			// groups (ON CONFLICT and the copy's index take the columns
			// in any order); the poller reads the first branch's group.
			keys: []string{"grp", "branch"}, vals: []string{"total", "n"},
			pollKey: "grp", pollVal: "total", pollPrefix: firstBranch,
		},
		source:    GroupBy,
		transform: "TRANSFORM %[1]s FROM %[2]s SELECT grp, sum(v) AS total, count(*) AS n WHERE v >= 0 GROUP BY grp UNION ALL SELECT grp, sum(v), count(*) FROM %[2]s WHERE v < 0 GROUP BY grp",
		pollSum:   true,
	},
	IntersectAll: {
		shape: shape{
			name:       IntersectAll,
			definition: "SELECT grp, v, row_number() OVER (PARTITION BY grp, v) AS ordinal FROM (SELECT grp, v FROM %[1]s WHERE v >= 0 INTERSECT ALL SELECT grp, v FROM %[1]s WHERE id > 0) q",
			keys:       []string{"grp", "v", "ordinal"},
			pollKey:    "grp", pollVal: "v",
		},
		source:    GroupBy,
		transform: "TRANSFORM %[1]s FROM %[2]s SELECT grp, v WHERE v >= 0 INTERSECT ALL SELECT grp, v FROM %[2]s WHERE id > 0",
		rowKeyed:  true, pollGroup: true,
		byGroup: "SELECT grp, v, row_number() OVER (PARTITION BY grp, v) AS ordinal FROM (SELECT grp, v FROM %[1]s WHERE v >= 0 AND grp IN (SELECT grp FROM g) INTERSECT ALL SELECT grp, v FROM %[1]s WHERE id > 0 AND grp IN (SELECT grp FROM g)) q",
	},
	UnionValues: {
		shape: shape{
			name:       UnionValues,
			definition: "SELECT grp, max(v) AS top, count(*) AS n FROM (SELECT grp, v FROM %[1]s WHERE v >= 0 UNION SELECT grp, v FROM %[1]s WHERE v < 0) u GROUP BY grp",
			keys:       []string{"grp"}, vals: []string{"top", "n"},
			pollKey: "grp", pollVal: "top",
		},
		source:    GroupBy,
		transform: "TRANSFORM %[1]s WITH u AS (SELECT grp, v FROM %[2]s WHERE v >= 0 UNION SELECT grp, v FROM %[2]s WHERE v < 0) FROM u SELECT grp, max(v) AS top, count(*) AS n GROUP BY grp",
		pollGroup: true,
	},
	WindowJoin: {
		shape: shape{
			name:       WindowJoin,
			definition: "SELECT c.id AS cid, s.id AS id, s.v AS v, sum(s.v) OVER (PARTITION BY c.id) AS total FROM %[1]s s JOIN %[2]s c ON c.id = s.customer_id",
			keys:       []string{"cid", "id"}, vals: []string{"v", "total"},
			// customer_id = id % 10,000 + 1: the poller finds the row
			// through the target's key index, which cid leads.
			pollKey: "id", pollVal: "v", pollPrefix: [][2]string{{"cid", fmt.Sprintf("p.x %% %d + 1", shapeCustomers)}},
		},
		source:    Join,
		transform: "TRANSFORM %[1]s FROM %[2]s s JOIN %[3]s c ON c.id = s.customer_id SELECT c.id AS cid, s.id AS id, s.v AS v, sum(s.v) OVER (PARTITION BY c.id) AS total",
		recompute: "d.cid = ANY (ARRAY(SELECT DISTINCT customer_id FROM %[1]s WHERE id = ANY ($1::bigint[])))",
	},
	NullChain: {
		shape: shape{
			name:       NullChain,
			definition: "SELECT c.id AS cid, sum(s.v) AS total, count(*) AS n FROM %[1]s s LEFT JOIN %[2]s c ON c.id = s.customer_id GROUP BY c.id",
			keys:       []string{"cid"}, vals: []string{"total", "n"},
			pollKey: "cid", pollVal: "total",
			nullKeys: true,
		},
		source:    Join,
		load:      fmt.Sprintf("DELETE FROM %%[2]s WHERE id = %d", nullChainMissing),
		upstream:  "TRANSFORM %[1]s FROM %[2]s s LEFT JOIN %[3]s c ON c.id = s.customer_id SELECT s.id AS id, c.region AS region, s.v AS v",
		transform: "TRANSFORM %[1]s FROM %[4]s m SELECT m.c_id AS cid, sum(m.v) AS total, count(*) AS n GROUP BY m.c_id",
		pollSum:   true,
		groupOf: func(id int64) (int64, bool) {
			// customer_id = id % 10,000 + 1; the missing customer's rows
			// have the NULL group, which the poller cannot name.
			c := id%shapeCustomers + 1
			return c, c != nullChainMissing
		},
		chained: true,
	},
}

// chainBaseline is the null_chain shape's drain baseline: one
// statement per batch that does both transforms' work, as a batch job
// keeping both tables would: it upserts the changed rows' LEFT JOIN rows
// into a copy of bench_mid (keyed NULLS NOT DISTINCT by id, c_id, as
// Trellis keys it) and recomputes the changed rows' groups from the
// sources into the copy of the target. A changed row without a customer
// recomputes the NULL group from the rows of its customer_id: in this
// data customer 2 is the only one missing, so those are the group's
// rows (the benchmark's check of the copy fails otherwise).
func (e *env) chainBaseline(cp string) (create []string, upsert string) {
	src, cust, mid := e.table("bench_src"), e.table("bench_customers"), cp+"_mid"
	join := fmt.Sprintf("SELECT s.id AS id, c.id AS c_id, c.region AS region, s.v AS v FROM %s s LEFT JOIN %s c ON c.id = s.customer_id", src, cust)
	create = []string{
		fmt.Sprintf("CREATE TABLE %s AS %s", mid, join),
		fmt.Sprintf("CREATE UNIQUE INDEX ON %s (id, c_id) NULLS NOT DISTINCT", mid),
		fmt.Sprintf("VACUUM (ANALYZE) %s", mid),
		fmt.Sprintf("CREATE TABLE %s AS %s", cp, e.definition()),
		e.keyIndex(cp),
		fmt.Sprintf("VACUUM (ANALYZE) %s", cp),
	}
	upsert = fmt.Sprintf("WITH j AS (%[1]s WHERE s.id = ANY ($1::bigint[])), "+
		"m AS (INSERT INTO %[2]s (id, c_id, region, v) SELECT id, c_id, region, v FROM j ON CONFLICT (id, c_id) DO UPDATE SET region = EXCLUDED.region, v = EXCLUDED.v) "+
		"INSERT INTO %[3]s (cid, total, n) SELECT c.id, sum(s.v), count(*) FROM %[4]s s LEFT JOIN %[5]s c ON c.id = s.customer_id "+
		"WHERE s.customer_id = ANY (ARRAY(SELECT DISTINCT customer_id FROM %[4]s WHERE id = ANY ($1::bigint[]))) GROUP BY c.id "+
		"ON CONFLICT (cid) DO UPDATE SET total = EXCLUDED.total, n = EXCLUDED.n", join, mid, cp, src, cust)
	return create, upsert
}

// moreShapeNames lists moreShapes in the order Shapes gives them.
var moreShapeNames = []string{Distinct, TopKGlobal, Intersect, Except, Anti, UnionAgg, WindowJoin, UnionGroups, IntersectAll, UnionValues, NullChain}

// more returns the benchmark's shape's moreShapes entry, if it is one.
func (e *env) more() (moreShape, bool) {
	m, ok := moreShapes[e.shape.name]
	return m, ok
}

// sourceShape is the shape whose source tables the benchmark creates.
func (e *env) sourceShape() string {
	if m, ok := e.more(); ok {
		return m.source
	}
	return e.shape.name
}

// moreBaseline is baselineUpsert's statement for a shape of moreShapes
// keyed by its whole row or recomputed whole ("" for the others): the
// rows the definition yields for the changed ids (the groups they are
// in, for DISTINCT; all of them, for a global top-k) replace the copy's
// rows of those ids (or groups).
func (e *env) moreBaseline(cp string) string {
	m, ok := e.more()
	if !ok || !(m.rowKeyed || m.whole) {
		return ""
	}
	def, src := e.definition(), e.table("bench_src")
	cols := strings.Join(append(append([]string{}, e.shape.keys...), e.shape.vals...), ", ")
	switch {
	case m.whole:
		set := make([]string, len(e.shape.vals))
		for i, v := range e.shape.vals {
			set[i] = v + " = EXCLUDED." + v
		}
		return fmt.Sprintf("WITH d AS (SELECT %[1]s FROM (%[2]s) d WHERE cardinality($1::bigint[]) > 0), "+
			"gone AS (DELETE FROM %[3]s WHERE %[4]s NOT IN (SELECT %[4]s FROM d)) "+
			"INSERT INTO %[3]s (%[1]s) SELECT %[1]s FROM d ON CONFLICT %[5]s DO UPDATE SET %[6]s",
			cols, def, cp, e.shape.keys[0], e.keyTarget(), strings.Join(set, ", "))
	case e.shape.keys[0] == "grp":
		// The rows gone by an anti-join, which is hashed: NOT IN over d
		// (600,000 rows for a batch of 10,000 changes at 1M rows) does
		// not fit work_mem, so it ran as a subplan searched row by row
		// (one batch of intersect_all over 15 minutes).
		eqs := make([]string, len(e.shape.keys))
		for i, k := range e.shape.keys {
			eqs[i] = "d." + k + " = c." + k
		}
		match := strings.Join(eqs, " AND ")
		if m.byGroup != "" {
			def = fmt.Sprintf(m.byGroup, src)
		}
		return fmt.Sprintf("WITH g AS (SELECT DISTINCT grp FROM %[1]s WHERE id = ANY ($1::bigint[])), "+
			"d AS (SELECT %[2]s FROM (%[3]s) d WHERE d.grp IN (SELECT grp FROM g)), "+
			"gone AS (DELETE FROM %[4]s AS c WHERE c.grp IN (SELECT grp FROM g) AND NOT EXISTS (SELECT 1 FROM d WHERE %[5]s)) "+
			"INSERT INTO %[4]s (%[2]s) SELECT %[2]s FROM d ON CONFLICT (%[2]s) DO NOTHING", src, cols, def, cp, match)
	case m.byID != "":
		return fmt.Sprintf("WITH d AS (SELECT %[1]s FROM (%[2]s) d), "+
			"gone AS (DELETE FROM %[3]s WHERE id = ANY ($1::bigint[]) AND (%[1]s) NOT IN (SELECT %[1]s FROM d)) "+
			"INSERT INTO %[3]s (%[1]s) SELECT %[1]s FROM d ON CONFLICT (%[1]s) DO NOTHING", cols, fmt.Sprintf(m.byID, src), cp)
	default:
		return fmt.Sprintf("WITH d AS (SELECT %[1]s FROM (%[2]s) d WHERE d.id = ANY ($1::bigint[])), "+
			"gone AS (DELETE FROM %[3]s WHERE id = ANY ($1::bigint[]) AND (%[1]s) NOT IN (SELECT %[1]s FROM d)) "+
			"INSERT INTO %[3]s (%[1]s) SELECT %[1]s FROM d ON CONFLICT (%[1]s) DO NOTHING", cols, def, cp)
	}
}
