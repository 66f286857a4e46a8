// Package plan turns a transform's definition into the SQL that maintains
// it: the target's DDL, the recompute of a set of keys, the full resync, and
// the key-ordered pages of a build. All generated SQL lives here, and every
// identifier in it goes through package ident.
package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/ident"
)

// Spec is a compiled transform definition, stored as JSON in the catalog.
type Spec struct {
	Source Source `json:"source"`
	// Join is the joined table of a JOIN transform.
	Join *Join `json:"join,omitempty"`
	// Joins are the tables joined after Join, in order (a join of three or
	// more tables); each one's ON compares it with one earlier table (To).
	Joins []Join `json:"joins,omitempty"`
	// Semis are the semi- and anti-joins of WHERE ([NOT] EXISTS, [NOT]
	// IN), whose SQL is part of Where; they are the last positions of the
	// definition's tables (see Sources).
	Semis []Semi `json:"semis,omitempty"`
	// Key are the target's key columns of a GROUP BY or JOIN transform (a
	// projection's key is its source's key).
	Key     []Column `json:"key,omitempty"`
	Columns []Column `json:"columns"`
	// GroupBy are the GROUP BY expressions, in the order of Key.
	GroupBy []string `json:"group_by,omitempty"`
	// OpSchemas are the schemas, other than pg_catalog, whose operators
	// compare the values of the source's and the target's keys (an
	// extension's type, as citext, whose = is its own). Definitions made
	// since decision 0030 record each key column's operators (Source.KeyOps,
	// Column.Op, JoinOn.Op), which the generated SQL names; for one stored
	// before, with OpSchemas alone, the catalog derives them at load.
	OpSchemas []string `json:"op_schemas,omitempty"`
	// GroupJoined says the GROUP BY expressions read the joined table.
	GroupJoined bool `json:"group_joined,omitempty"`
	// GroupTable is the position of the table the GROUP BY expressions
	// read when it is a third or later one (Joins[GroupTable-2]).
	GroupTable int    `json:"group_table,omitempty"`
	Where      string `json:"where,omitempty"`
	// Having is the HAVING condition of an aggregate: a group it rejects
	// has no row.
	Having string `json:"having,omitempty"`
	// Global says an aggregate has no GROUP BY: its target holds the one
	// row of every source row (none when HAVING rejects it), and its key
	// has no columns.
	Global bool `json:"global,omitempty"`
	// Partials is set for a global aggregate maintained through partial
	// aggregates by range of source keys (decision 0051).
	Partials *Partials `json:"partials,omitempty"`
	// Window is set for a transform with window functions, top-k or
	// DISTINCT ON: its rows are recomputed a partition at a time.
	Window *Window `json:"window,omitempty"`
	// WithoutSourceIndex records the opt-out of WITHOUT SOURCE INDEX.
	WithoutSourceIndex bool `json:"without_source_index,omitempty"`
	// Reads is every source column the definition reads, for checks that a
	// column can be dropped.
	Reads []string `json:"reads,omitempty"`
	// BaseReads are the FROM table's columns the definition reads outside
	// its non-key columns (WHERE, GROUP BY, the key, ON); with each
	// column's own Reads they make up Reads again after an ALTER TRANSFORM.
	// Set by definitions that record reads per column (PerColumnReads).
	BaseReads      []string `json:"base_reads,omitempty"`
	PerColumnReads bool     `json:"per_column_reads,omitempty"`
	// Functions are the user functions the definition calls, as they
	// were when it was defined or last re-derived: a change to one
	// re-derives the target.
	Functions []Function `json:"functions,omitempty"`
	// Views are the views the definition reads, inlined (their base
	// tables are the sources).
	Views []View `json:"views,omitempty"`
	// SetOp is set for UNION [ALL], INTERSECT and EXCEPT: Source is its
	// first branch's table, and Sources lists every branch's.
	SetOp *SetOp `json:"set_op,omitempty"`
}

// Window is how a window transform partitions its rows. A change
// recomputes every row of the partitions its rows were and are in; with
// no PARTITION BY the one partition is the whole source.
type Window struct {
	// Partition are the PARTITION BY expressions, in the order of the
	// key columns that lead Spec.Key.
	Partition []string `json:"partition,omitempty"`
	// Rank and Limit keep, of each partition, the rows whose Rank (a
	// window function of the partition) is at most Limit: top-k and
	// DISTINCT ON. Rank is "" when every row is kept.
	Rank  string `json:"rank,omitempty"`
	Limit int64  `json:"limit,omitempty"`
}

// View is a view a definition reads: its query was inlined when the
// transform was defined (decision 0028), so a change to it is watched.
type View struct {
	OID uint32 `json:"oid"`
	// Name is the qualified name, "schema.view".
	Name string `json:"name"`
	// Fingerprint digests the view's definition (pg_get_viewdef).
	Fingerprint string `json:"fingerprint"`
	// Changed, once set, says how the view changed since (replaced,
	// dropped): the transform still reads the definition it had.
	Changed string `json:"changed,omitempty"`
}

// ViewNames are the qualified names of the views the definition reads.
func (s *Spec) ViewNames() []string {
	out := make([]string, 0, len(s.Views))
	for _, v := range s.Views {
		out = append(out, v.Name)
	}
	return out
}

// Function is a user function a definition calls (directly, through an
// operator, or as an aggregate's support function).
type Function struct {
	OID       uint32 `json:"oid"`
	Signature string `json:"signature"`
	// Fingerprint digests what defines the function's result: its body,
	// language, settings, volatility and return type.
	Fingerprint string `json:"fingerprint"`
}

// SetReads recomputes Reads (and the joined table's) from the base reads
// and every column's: after ALTER TRANSFORM adds or drops a column. A
// definition that did not record reads per column keeps its Reads.
func (s *Spec) SetReads() {
	if !s.PerColumnReads {
		return
	}
	union := func(base []string, per func(Column) []string) []string {
		out := append([]string(nil), base...)
		for _, c := range s.Columns {
			for _, r := range per(c) {
				if !slices.Contains(out, r) {
					out = append(out, r)
				}
			}
		}
		return out
	}
	s.Reads = union(s.BaseReads, func(c Column) []string { return c.Reads })
	if s.Join != nil {
		s.Join.Source.Reads = union(s.Join.BaseReads, func(c Column) []string { return c.JoinedReads })
	}
	for i := range s.Joins {
		s.Joins[i].Source.Reads = union(s.Joins[i].BaseReads, func(c Column) []string {
			if i < len(c.MoreReads) {
				return c.MoreReads[i]
			}
			return nil
		})
	}
}

// Tables are the qualified names ("schema.table") of every table the
// definition reads: the FROM table, then the joined ones, each once.
func (s *Spec) Tables() []string {
	var out []string
	for _, src := range s.Sources() {
		if n := src.Schema + "." + src.Table; !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// JoinList is every joined table in order: Join, then Joins. Position i
// of a definition's tables (0 the FROM table) is JoinList()[i-1].
func (s *Spec) JoinList() []*Join {
	if s.Join == nil {
		return nil
	}
	out := []*Join{s.Join}
	for i := range s.Joins {
		out = append(out, &s.Joins[i])
	}
	return out
}

// Sources are the definition's tables by position: the FROM table, each
// joined one, then each semi- or anti-join's (a table read twice is listed
// twice).
func (s *Spec) Sources() []Source {
	if s.SetOp != nil {
		var out []Source
		for _, b := range s.SetOp.Branches {
			if !b.Joined() {
				out = append(out, b.Source)
				continue
			}
			out = append(out, b.sources()...)
		}
		return out
	}
	out := []Source{s.Source}
	for _, j := range s.JoinList() {
		out = append(out, j.Source)
	}
	for _, sj := range s.Semis {
		out = append(out, sj.Source)
	}
	return out
}

// KeyMayBeNull reports whether a key column of the source may be NULL.
func (s *Source) KeyMayBeNull() bool {
	return slices.Contains(s.KeyNulls, true)
}

// NullableKeys reports whether some source of the definition is
// identified by a key that may be NULL; with src > 0, only that source.
func (s *Spec) NullableKeys(src int) bool {
	return slices.ContainsFunc(s.Sources(), func(so Source) bool {
		return (src == 0 || so.ID == src) && so.KeyMayBeNull()
	})
}

// NullableKeyRefusal says why the definition cannot read a source whose
// key may be NULL (decision 0049), "" when it can or reads none. Its
// units may be groups or partitions (an aggregate, a window, a top-k,
// DISTINCT ON) over the tables of FROM and JOIN: a changed row of the
// source is then only looked up by its key, NULL parts matching as its
// unique index matches them. A projection, or an inner or left join of
// two tables, may read one as its FROM table (decision 0054), an inner or
// left join of any tables as any of them (0062): its target is keyed by
// that key, NULL parts and all, as a join's; so may a branch of a UNION
// ALL of one-table branches that do not aggregate (0064), keyed by the
// branch and its key; EXISTS / IN may read one and a reader may hold
// them, its rows found by their correlation as any semi-join's (0064). A
// FULL or RIGHT JOIN and any other set operation would make the key a
// part of units of their own.
func (p *Plan) NullableKeyRefusal() string {
	s := &p.Spec
	var src *Source
	for _, so := range s.Sources() {
		if so.KeyMayBeNull() {
			src = &so
			break
		}
	}
	if src == nil {
		return ""
	}
	var nulls []string
	for i, k := range src.KeyCols {
		if i < len(src.KeyNulls) && src.KeyNulls[i] {
			nulls = append(nulls, k)
		}
	}
	plural := ""
	if len(nulls) > 1 {
		plural = "s"
	}
	what := fmt.Sprintf("%s.%s, whose key column%s %s may be NULL", src.Schema, src.Table, plural, strings.Join(nulls, ", "))
	switch {
	case s.SetOp != nil && !s.SetOp.plainUnionAll():
		return "a set operation reading " + what + ", is not supported unless it is a UNION ALL of branches that each read one table without aggregating: aggregate it in the branch's place (GROUP BY), or read the sources of " + src.Table
	case p.Kind() == KindJoin && p.Full():
		return "a transform reading " + what + ", is not supported (its target would be keyed by that key) under a FULL or RIGHT JOIN: make it a table of a projection or of an inner or left join, group by the columns it selects, its key columns included (SELECT ... GROUP BY " + strings.Join(src.KeyCols, ", ") + ", ...), or read the sources of " + src.Table
	}
	return ""
}

// GroupPos is the position of the table the GROUP BY expressions read.
func (s *Spec) GroupPos() int {
	switch {
	case s.GroupTable > 0:
		return s.GroupTable
	case s.GroupJoined:
		return 1
	}
	return 0
}

// Source is the table a projection reads.
type Source struct {
	ID       int      `json:"id"`
	Schema   string   `json:"schema"`
	Table    string   `json:"table"`
	Alias    string   `json:"alias"`
	KeyCols  []string `json:"key_columns"`
	KeyTypes []string `json:"key_types"`
	// KeyOps are the key columns' operators, one per column (nil for
	// pg_catalog's); empty when none has its own.
	KeyOps []*Op `json:"key_ops,omitempty"`
	// KeyNulls says, per key column, whether it may be NULL: a Trellis
	// target identified by its unique index NULLS NOT DISTINCT (decision
	// 0049). Empty when none may (every source defined before).
	KeyNulls []bool `json:"key_nulls,omitempty"`
	// Needs are the columns whose old values this transform needs captured
	// (GROUP BY and JOIN columns).
	Needs []string `json:"needs,omitempty"`
	// Reads are the columns of this table the definition reads (the FROM
	// table's are in Spec.Reads).
	Reads []string `json:"reads,omitempty"`
}

// Join is the joined side of a JOIN transform.
type Join struct {
	Left bool `json:"left,omitempty"`
	// Full is a FULL JOIN of two tables (Left is set too: the joined side
	// may be missing): either side may be missing, and the unit of a
	// target row is the key of the first table it holds (decision 0033).
	Full bool `json:"full,omitempty"`
	// Right is a RIGHT JOIN after the second table (decision 0039): the
	// tables before it may be missing (NULL-extended together), not the
	// joined one. A RIGHT JOIN of the first two tables is a swapped LEFT
	// JOIN instead (0033).
	Right  bool     `json:"right,omitempty"`
	Source Source   `json:"source"`
	On     []JoinOn `json:"on"`
	// To is the position of the earlier table whose columns the ON
	// clause's From side names (0, the FROM table, for the first join).
	To int `json:"to,omitempty"`
	// BaseReads are the joined table's columns read outside the non-key
	// columns (see Spec.BaseReads).
	BaseReads []string `json:"base_reads,omitempty"`
}

// Semi is a semi-join (EXISTS, IN) or anti-join (NOT EXISTS, NOT IN) of
// WHERE: the rows of the outer table at To that have (or, Anti, have not)
// a row of Source matching On and Where.
type Semi struct {
	Anti   bool     `json:"anti,omitempty"`
	In     bool     `json:"in,omitempty"`
	Source Source   `json:"source"`
	On     []JoinOn `json:"on"`
	To     int      `json:"to,omitempty"`
	// Where is the subquery's condition on Source's columns alone.
	Where string `json:"where,omitempty"`
}

// SQL is the WHERE condition the semi-join stands for, over the outer
// table's alias.
func (sj Semi) SQL(outer string) string {
	a := ident.Quote(aliasOf(sj.Source))
	table := ident.Qualified(sj.Source.Schema, sj.Source.Table) + " AS " + a
	var conds []string
	on := sj.On
	if sj.In {
		on = on[1:]
	}
	for _, c := range on {
		conds = append(conds, cmp(a+"."+ident.Quote(c.Joined), "=", ident.Quote(outer)+"."+ident.Quote(c.From), c.Op))
	}
	if sj.Where != "" {
		conds = append(conds, "("+sj.Where+")")
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	var out string
	if sj.In {
		out = inQuery([]string{ident.Quote(outer) + "." + ident.Quote(sj.On[0].From)},
			fmt.Sprintf("SELECT %s.%s FROM %s%s", a, ident.Quote(sj.On[0].Joined), table, where), []*Op{sj.On[0].Op})
	} else {
		out = fmt.Sprintf("EXISTS (SELECT 1 FROM %s%s)", table, where)
	}
	if sj.Anti {
		return "NOT " + out
	}
	return out
}

// JoinOn is one equality of the ON clause: a column of the earlier table
// (the FROM table for the first join, see Join.To) and a column of the
// joined one.
type JoinOn struct {
	From   string `json:"from"`
	Joined string `json:"joined"`
	// Op is the operator of the columns' type when both are of one type
	// with operators of its own (nil: pg_catalog's =).
	Op *Op `json:"op,omitempty"`
}

// Column is one selected output column.
type Column struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
	Type string `json:"type,omitempty"`
	// Op is a key column's operator when its type has its own (see Op).
	Op *Op `json:"op,omitempty"`
	// Paused columns are not maintained (PAUSE TRANSFORM t.col): existing
	// values stay, new rows get NULL.
	Paused bool `json:"paused,omitempty"`
	// Reads and JoinedReads are the FROM and joined tables' columns the
	// expression reads.
	Reads       []string `json:"reads,omitempty"`
	JoinedReads []string `json:"joined_reads,omitempty"`
	// MoreReads are the columns of each of Spec.Joins the expression reads.
	MoreReads [][]string `json:"more_reads,omitempty"`
}

// Target is a qualified target table.
type Target struct {
	Schema string
	Name   string
}

// String is the qualified name for messages: schema.table.
func (t Target) String() string { return t.Schema + "." + t.Name }

// Quoted is the qualified, quoted name for SQL.
func (t Target) Quoted() string { return ident.Qualified(t.Schema, t.Name) }

// Plan is the SQL of one transform.
type Plan struct {
	Target Target
	Spec   Spec
}

func (p *Plan) alias() string {
	if p.Spec.Source.Alias != "" {
		return p.Spec.Source.Alias
	}
	return p.Spec.Source.Table
}

func (p *Plan) from() string {
	return ident.Qualified(p.Spec.Source.Schema, p.Spec.Source.Table) + " AS " + ident.Quote(p.alias())
}

// srcKey is the source's key columns qualified by the alias.
func (p *Plan) srcKey() []string {
	a := ident.Quote(p.alias())
	out := make([]string, len(p.Spec.Source.KeyCols))
	for i, k := range p.Spec.Source.KeyCols {
		out[i] = a + "." + ident.Quote(k)
	}
	return out
}

func (p *Plan) columnNames() []string {
	names := append([]string(nil), p.Spec.Source.KeyCols...)
	for _, c := range p.Spec.Columns {
		names = append(names, c.Name)
	}
	return names
}

// selectList is key columns then expressions, named as the target's columns.
func (p *Plan) selectList() string {
	parts := make([]string, 0, len(p.Spec.Source.KeyCols)+len(p.Spec.Columns))
	for i, k := range p.srcKey() {
		parts = append(parts, k+" AS "+ident.Quote(p.Spec.Source.KeyCols[i]))
	}
	for _, c := range p.Spec.Columns {
		parts = append(parts, colExpr(c)+" AS "+ident.Quote(c.Name))
	}
	return strings.Join(parts, ", ")
}

func (p *Plan) where(extra ...string) string {
	conds := append([]string(nil), extra...)
	if p.Spec.Where != "" {
		conds = append(conds, "("+p.Spec.Where+")")
	}
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// CreateTarget is the DDL that creates the empty target with the types
// PostgreSQL infers for the expressions, and its primary key.
func (p *Plan) CreateTarget() string {
	return fmt.Sprintf("CREATE TABLE %s AS SELECT %s FROM %s%s WITH NO DATA;\nALTER TABLE %s ADD PRIMARY KEY (%s)",
		p.Target.Quoted(), p.selectList(), p.from(), p.where(), p.Target.Quoted(), ident.List(p.Spec.Source.KeyCols))
}

// ProbeColumn is a query whose single result column has the type PostgreSQL
// infers for expr over the source; it returns no rows.
func (p *Plan) ProbeColumn(expr string) string {
	return fmt.Sprintf("SELECT (%s) AS c FROM %s%s LIMIT 0", expr, p.fromClause(), p.groupBy())
}

// keyTuple renders (a, b) or a for a list of column expressions.
func keyTuple(cols []string) string {
	if len(cols) == 1 {
		return cols[0]
	}
	return "(" + strings.Join(cols, ", ") + ")"
}

// upsert inserts the rows of srcName and updates the target rows whose
// values (or key, when equal keys can differ, as numeric 2 and 2.000 do)
// are not identical to them.
func (p *Plan) upsert(srcName string) string {
	return p.upsertRows(srcName, p.Spec.Source.KeyCols, p.Spec.Source.KeyTypes, p.columnNames())
}

// upsertRows is upsert for a target keyed by the columns names (of types
// types; none: the one row of a global aggregate, whose unique index is on
// a constant) whose columns are all, key first.
func (p *Plan) upsertRows(srcName string, names, types, all []string) string {
	t := p.Target.Quoted()
	conflict := ident.List(names)
	if len(names) == 0 {
		conflict = "(true)"
	}
	cols := ident.List(all)
	var set, cur, exc []string
	compare := func(name, typ string) {
		q := ident.Quote(name)
		set = append(set, q+" = EXCLUDED."+q)
		cur = append(cur, identity(t+"."+q, typ))
		exc = append(exc, identity("EXCLUDED."+q, typ))
	}
	for i, k := range names {
		if !equalityIsIdentity[types[i]] {
			compare(k, types[i])
		}
	}
	for _, c := range p.Spec.Columns {
		if c.Paused {
			continue // a paused column keeps its values
		}
		compare(c.Name, c.Type)
	}
	if len(set) == 0 {
		return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s ON CONFLICT (%s) DO NOTHING", t, cols, cols, srcName, conflict)
	}
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s ON CONFLICT (%s) DO UPDATE SET %s WHERE (%s) IS DISTINCT FROM (%s)",
		t, cols, cols, srcName, conflict, strings.Join(set, ", "), strings.Join(cur, ", "), strings.Join(exc, ", "))
}

// keyMatch is "t.k1 = s.k1 AND ..." for two aliases over the key columns.
func (p *Plan) keyMatch(a, b string) string {
	var parts []string
	for i, k := range p.Spec.Source.KeyCols {
		q := ident.Quote(k)
		parts = append(parts, cmp(a+"."+q, "=", b+"."+q, opAt(p.Spec.Source.KeyOps, i)))
	}
	return strings.Join(parts, " AND ")
}

// keysCTE unnests the key parameters ($1..$n, one text[] per key column)
// into typed columns named as the key columns.
func (p *Plan) keysCTE() string {
	var params, cols, casts []string
	types := p.Spec.Source.KeyTypes
	for i, k := range p.Spec.Source.KeyCols {
		params = append(params, keyParam(i+1, types[i]))
		cols = append(cols, fmt.Sprintf("k%d", i+1))
		casts = append(casts, fromKeyParam(fmt.Sprintf("u.k%d", i+1), types[i])+" AS "+ident.Quote(k))
	}
	return zipped(params, func(i int) string { return "u." + cols[i] }, casts, anyOwnParam(types))
}

// Recompute re-derives the target rows of a set of source keys from the
// current source rows, in one statement: rows the keys no longer produce are
// deleted, the rest upserted (unchanged rows are not rewritten). Parameters:
// one text[] per key column, element i of each forming key i; with upTo,
// then the key values (text) of an initial build's cursor, past which the
// target is left to the build. It returns the counts deleted and upserted.
func (p *Plan) Recompute(upTo bool) string {
	pre, src, tCond := p.recomputeParts(upTo)
	return p.withDelete(pre, src, tCond)
}

// EvalKeys evaluates the definition's columns for a set of keys and
// writes nothing: a row on which a column fails makes it fail. Parameters
// as for the keyed recompute of the plan's kind (see KeyedArgs' callers).
func (p *Plan) EvalKeys(upTo, withNulls bool) string {
	var with, q string
	switch p.Kind() {
	case KindProjection:
		pre, src, _ := p.recomputeParts(upTo)
		if pre != "" {
			with = "WITH " + strings.TrimSuffix(pre, ", ") + " "
		}
		q = src
	case KindJoin:
		with, q = p.joinKeysParts()
		with = "WITH " + with + " "
	default:
		with, q = p.groupsParts(withNulls)
		with = "WITH " + with + " "
	}
	// Every column is referenced, so every one is evaluated.
	return with + "SELECT count(ROW(s.*)) FROM (" + q + ") s"
}

// recomputeParts are the parts of Recompute: a CTE prefix, the source
// query of the keys, and the delete's condition: the target's rows of the
// keys src does not yield.
func (p *Plan) recomputeParts(upTo bool) (pre, src, tCond string) {
	keys := p.Spec.Source.KeyCols
	ops := p.Spec.Source.KeyOps
	n := len(keys)
	var srcCond string
	// The target's rows to delete are those of the keys src does not
	// yield: found from the keys and src alone, they are looked up in the
	// target's key index, so the delete costs what the keys gone cost (a
	// condition on all the keys made the planner scan the whole target).
	gone := func(from string, k []string) string {
		var match []string
		for i, c := range keys {
			match = append(match, cmp("src."+ident.Quote(c), "=", k[i], opAt(ops, i)))
		}
		return from + " WHERE NOT EXISTS (SELECT 1 FROM src WHERE " + strings.Join(match, " AND ") + ")"
	}
	if n == 1 && !isArrayType(p.Spec.Source.KeyTypes[0]) {
		// A plain array match lets the planner use the primary keys.
		o := opAt(ops, 0)
		kt := p.Spec.Source.KeyTypes[0]
		typ, elem := o.typeOf(kt), "k.k"
		if o.overDomain(kt) {
			// As inParam names it: element by element (see overDomain).
			typ, elem = kt, o.side("k.k")
		}
		srcCond = inParam(p.srcKey()[0], 1, kt, o)
		// The keys by subscript: unnest would expand a composite key.
		tCond = anyOf("t."+ident.Quote(keys[0]), "ARRAY(SELECT "+elem+" "+
			gone(fmt.Sprintf("FROM (SELECT ($1::%s[])[i] AS k FROM generate_subscripts($1::%s[], 1) AS i) AS k", typ, typ), []string{"k.k"})+")", o)
	} else {
		pre = "k AS (" + p.keysCTE() + "), "
		srcCond = inQuery(p.srcKey(), "SELECT "+ident.List(keys)+" FROM k", ops)
		var tk, kk []string
		for _, k := range keys {
			tk = append(tk, "t."+ident.Quote(k))
			kk = append(kk, "k."+ident.Quote(k))
		}
		tCond = inQuery(tk, "SELECT "+strings.Join(kk, ", ")+" "+gone("FROM k", kk), ops)
	}
	conds := []string{srcCond}
	tConds := []string{tCond}
	if upTo {
		conds = append(conds, p.srcKeyCmp("<=", n+1))
		tConds = append(tConds, p.targetKeyCmp("<=", n+1))
	}
	src = fmt.Sprintf("SELECT %s FROM %s%s", p.selectList(), p.from(), p.where(conds...))
	return pre, src, strings.Join(tConds, " AND ")
}

// Resync re-derives the whole target from the whole source (after a
// TRUNCATE of the source). With upTo, parameters are an initial build's
// cursor, and only the part of the target up to it is touched.
func (p *Plan) Resync(upTo bool) string {
	var conds, tConds []string
	if upTo {
		conds = append(conds, p.srcKeyCmp("<=", 1))
		tConds = append(tConds, p.targetKeyCmp("<=", 1))
	}
	src := fmt.Sprintf("SELECT %s FROM %s%s", p.selectList(), p.from(), p.where(conds...))
	return p.withDeleteUpsert("", src, strings.Join(tConds, " AND "))
}

// targetKey is the target's key columns qualified by the alias t.
func (p *Plan) targetKey() []string {
	tk := make([]string, len(p.Spec.Source.KeyCols))
	for i, k := range p.Spec.Source.KeyCols {
		tk[i] = "t." + ident.Quote(k)
	}
	return tk
}

// srcKeyCmp compares the source's key with the key values (text) of the
// parameters from $start on: op is <, <=, >, >= or =.
func (p *Plan) srcKeyCmp(op string, start int) string {
	return cmpTuple(p.srcKey(), op, p.cursorCols(start), p.Spec.Source.KeyOps)
}

// targetKeyCmp is srcKeyCmp for the target's key columns (alias t).
func (p *Plan) targetKeyCmp(op string, start int) string {
	return cmpTuple(p.targetKey(), op, p.cursorCols(start), p.Spec.Source.KeyOps)
}

// pageRange are the conditions on the source's and the target's keys of a
// build page (lower, upper]: parameters lower's key values then upper's.
func (p *Plan) pageRange(hasLower, hasUpper bool) (srcConds, tConds []string) {
	next := 1
	if hasLower {
		srcConds = append(srcConds, p.srcKeyCmp(">", next))
		tConds = append(tConds, p.targetKeyCmp(">", next))
		next += len(p.Spec.Source.KeyCols)
	}
	if hasUpper {
		srcConds = append(srcConds, p.srcKeyCmp("<=", next))
		tConds = append(tConds, p.targetKeyCmp("<=", next))
	}
	return srcConds, tConds
}

// withDeleteUpsert assembles WITH <pre> src AS (...), del AS (DELETE target
// rows matching tCond that src does not yield), ins AS (upsert src) SELECT
// the counts.
func (p *Plan) withDeleteUpsert(pre, src, tCond string) string {
	delWhere := "NOT EXISTS (SELECT 1 FROM src WHERE " + p.keyMatch("src", "t") + ")"
	if tCond != "" {
		delWhere = tCond + " AND " + delWhere
	}
	return p.withDelete(pre, src, delWhere)
}

// withDelete is withDeleteUpsert with the delete's whole condition given.
func (p *Plan) withDelete(pre, src, delWhere string) string {
	t := p.Target.Quoted()
	del := fmt.Sprintf("DELETE FROM %s AS t WHERE %s RETURNING 1", t, delWhere)
	return fmt.Sprintf("WITH %ssrc AS (%s), del AS (%s), ins AS (%s RETURNING 1) SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)",
		pre, src, del, p.upsert("src"))
}

// BuildBound is the query that finds the upper end of the next build page:
// the key n rows past the cursor ($1..$k the cursor's key values as text, or
// no cursor parameters when first). It returns the key's columns as text.
func (p *Plan) BuildBound(first bool, n int) string {
	cond := ""
	if !first {
		cond = " WHERE " + p.srcKeyCmp(">", 1)
	}
	var outs []string
	for i, k := range p.srcKey() {
		outs = append(outs, textOf(k, p.Spec.Source.KeyTypes[i]))
	}
	return fmt.Sprintf("SELECT %s FROM %s%s ORDER BY %s OFFSET %d LIMIT 1",
		strings.Join(outs, ", "), p.from(), cond, strings.Join(p.srcKey(), ", "), n-1)
}

// cursorCols are the parameters from $start on, one per source key
// column, cast to the key's types.
func (p *Plan) cursorCols(start int) []string {
	var ps []string
	for i, t := range p.Spec.Source.KeyTypes {
		ps = append(ps, fmt.Sprintf("$%d::%s", start+i, t))
	}
	return ps
}

// BuildPage re-derives the target rows of the source keys in (lower,
// upper]: lower is absent on the first page, upper on the last. Parameters:
// lower's key values then upper's, as text. With deleteUnbacked (a
// rebuild), rows are upserted and target rows in the range that the source
// no longer backs are deleted; an initial build only inserts.
func (p *Plan) BuildPage(hasLower, hasUpper, deleteUnbacked bool) string {
	srcConds, tConds := p.pageRange(hasLower, hasUpper)
	src := fmt.Sprintf("SELECT %s FROM %s%s", p.selectList(), p.from(), p.where(srcConds...))
	if !deleteUnbacked {
		// An initial build: the drain leaves keys past the build's cursor
		// alone, so the page's rows are new to the target.
		return fmt.Sprintf("WITH ins AS (INSERT INTO %s (%s) %s RETURNING 1) SELECT 0::bigint, count(*) FROM ins",
			p.Target.Quoted(), ident.List(p.columnNames()), src)
	}
	delWhere := append(tConds, "NOT EXISTS (SELECT 1 FROM src WHERE "+p.keyMatch("src", "t")+")")
	del := fmt.Sprintf("DELETE FROM %s AS t WHERE %s RETURNING 1", p.Target.Quoted(), strings.Join(delWhere, " AND "))
	return fmt.Sprintf("WITH src AS (%s), del AS (%s), ins AS (%s RETURNING 1) SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)",
		src, del, p.upsert("src"))
}

// Query is the whole definition as one query, paused columns' expressions
// included: what it calls is what the definition calls.
func (p *Plan) Query() string {
	q := &Plan{Target: p.Target, Spec: p.Spec}
	q.Spec.Columns = slices.Clone(p.Spec.Columns)
	for i := range q.Spec.Columns {
		q.Spec.Columns[i].Paused = false
	}
	if q.Kind() == KindProjection {
		return q.Recount()
	}
	return q.shapeQuery()
}

// Recount is a fresh recompute of the definition as a plain query, for
// tests and checks: every row the target should hold.
func (p *Plan) Recount() string {
	return fmt.Sprintf("SELECT %s FROM %s%s", p.selectList(), p.from(), p.where())
}

// BuildPageKeys lists, as text, the keys of a build page (see BuildPage for
// the parameters): the source's keys in the range and, withTarget, the
// target's too (a rebuild also deletes what the source no longer backs).
// A page on which a row fails is re-derived key by key from this list.
func (p *Plan) BuildPageKeys(hasLower, hasUpper, withTarget bool) string {
	srcConds, tConds := p.pageRange(hasLower, hasUpper)
	texts := func(cols []string) string {
		out := make([]string, len(cols))
		for i, c := range cols {
			out[i] = textOf(c, p.Spec.Source.KeyTypes[i])
		}
		return strings.Join(out, ", ")
	}
	where := func(conds []string) string {
		if len(conds) == 0 {
			return ""
		}
		return " WHERE " + strings.Join(conds, " AND ")
	}
	q := fmt.Sprintf("SELECT %s FROM %s%s", texts(p.srcKey()), p.from(), where(srcConds))
	if withTarget {
		q += fmt.Sprintf(" UNION SELECT %s FROM %s AS t%s", texts(p.targetKey()), p.Target.Quoted(), where(tConds))
	}
	return q
}

// BuildPageNext inserts the next page of an initial build: the first n
// rows past the cursor ($1..$k the cursor's key values as text, absent on
// the first page), in key order. It returns how many rows it inserted and
// the last one's key as text (the next cursor), in one statement, so no
// query looks for the page's end first. Rows failing the WHERE are passed
// over; the page's end is the last key inserted.
func (p *Plan) BuildPageNext(hasLower bool, n int) string {
	var conds []string
	if hasLower {
		conds = append(conds, p.srcKeyCmp(">", 1))
	}
	src := fmt.Sprintf("SELECT %s FROM %s%s ORDER BY %s LIMIT %d",
		p.selectList(), p.from(), p.where(conds...), strings.Join(p.srcKey(), ", "), n)
	var texts, desc []string
	for i, k := range p.Spec.Source.KeyCols {
		texts = append(texts, textOf(ident.Quote(k), p.Spec.Source.KeyTypes[i]))
		desc = append(desc, ident.Quote(k)+" DESC")
	}
	return fmt.Sprintf("WITH ins AS (INSERT INTO %s (%s) %s RETURNING %s) SELECT count(*), (SELECT ARRAY[%s] FROM ins ORDER BY %s LIMIT 1) FROM ins",
		p.Target.Quoted(), ident.List(p.columnNames()), src, ident.List(p.Spec.Source.KeyCols), strings.Join(texts, ", "), strings.Join(desc, ", "))
}

// InsertAll inserts every row of the definition into the (empty) target:
// an initial build in one statement. No parameters; the command tag counts
// the rows.
func (p *Plan) InsertAll() string {
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s%s",
		p.Target.Quoted(), ident.List(p.columnNames()), p.selectList(), p.from(), p.where())
}
