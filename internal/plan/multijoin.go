package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/ident"
)

// A join of three or more tables (decision 0026) is a tree: each joined
// table's ON compares it with one earlier table (Join.To). Its affected
// keys are found along the tree's paths: from the changed table's rows
// (old and current images) to the table whose values make the target's
// unit (the FROM table's key for a join, the grouped table for an
// aggregate), through the tables between them as they are now.

// Multi reports whether the definition joins three or more tables, has a
// semi- or anti-join, or is a FULL JOIN: its affected keys come from
// AffectedAt.
func (p *Plan) Multi() bool { return len(p.Spec.Joins) > 0 || len(p.Spec.Semis) > 0 || p.Full() }

// sourceAt is the table at a position (0 the FROM table).
func (p *Plan) sourceAt(pos int) Source { return p.Spec.Sources()[pos] }

// edge is the join of the table at pos (not the FROM table) to the earlier
// table its ON (or a semi-join's correlation) names.
func (p *Plan) edge(pos int) Join {
	joins := p.Spec.JoinList()
	if pos-1 < len(joins) {
		return *joins[pos-1]
	}
	sj := p.Spec.Semis[pos-1-len(joins)]
	return Join{Source: sj.Source, On: sj.On, To: sj.To}
}

// parentOf is the earlier table a joined table's ON names.
func (p *Plan) parentOf(pos int) int { return p.edge(pos).To }

func (p *Plan) tableAs(pos int) string {
	s := p.sourceAt(pos)
	return ident.Qualified(s.Schema, s.Table) + " AS " + ident.Quote(aliasOf(s))
}

// joinOn renders a join's ON clause between its earlier table and itself.
func (p *Plan) joinOn(j Join) string {
	return onSQL(j.On, aliasOf(p.sourceAt(j.To)), aliasOf(j.Source))
}

// nullable reports whether a table's row can be missing from a result row
// (NULL-extended): a RIGHT or FULL JOIN after it may leave out every
// table before that join; it is joined with LEFT (or FULL) JOIN; or it is
// joined (INNER or LEFT) to a table that can be missing.
func (p *Plan) nullable(pos int) bool {
	joins := p.Spec.JoinList()
	for k := pos + 1; k <= len(joins); k++ {
		if joins[k-1].Full || joins[k-1].Right {
			return true
		}
	}
	if pos == 0 {
		return false
	}
	e := p.edge(pos)
	switch {
	case e.Left:
		return true
	case e.Right:
		return false // kept whether or not the tables before it match
	}
	return p.nullable(e.To)
}

// MayBeMissing reports whether the row of the table at pos can be missing
// from a result row (NULL-extended by an outer join).
func (p *Plan) MayBeMissing(pos int) bool { return p.nullable(pos) }

// GroupNullable reports whether an aggregate over a join groups (or a
// window over a join partitions) by a table whose row can be missing
// (LEFT JOIN), so its group can be NULL.
func (p *Plan) GroupNullable() bool {
	partitioned := p.Spec.Window != nil && len(p.Spec.Window.Partition) > 0
	return (len(p.Spec.GroupBy) > 0 || partitioned) && p.Spec.Join != nil && p.nullable(p.Spec.GroupPos())
}

// UnitIsGroup says the target's unit is a group of rows (an aggregate's
// group, a window's partition), found from the changed rows, not their
// key.
func (p *Plan) UnitIsGroup() bool {
	return p.Kind() == KindAggregate || p.Kind() == KindWindow
}

// treePath is the positions from a to b along the join tree, both included.
func (p *Plan) treePath(a, b int) []int {
	up := func(x int) []int {
		out := []int{x}
		for x > 0 {
			x = p.parentOf(x)
			out = append(out, x)
		}
		return out
	}
	ua, ub := up(a), up(b)
	// The lowest common ancestor is the first of a's ancestors that is
	// also one of b's.
	ia := slices.IndexFunc(ua, func(x int) bool { return slices.Contains(ub, x) })
	ib := slices.Index(ub, ua[ia])
	out := slices.Clone(ua[:ia+1])
	for i := ib - 1; i >= 0; i-- {
		out = append(out, ub[i])
	}
	return out
}

// edgeOn is the ON clause of the tree edge between two adjacent positions.
func (p *Plan) edgeOn(x, y int) string {
	return p.joinOn(p.edge(max(x, y)))
}

// images is a derived table, named as the table at pos, of the changed
// rows' captured columns: their old values and their current rows (as
// c.Part asks).
func (p *Plan) images(c Changes, pos int) string {
	src := p.sourceAt(pos)
	a := aliasOf(src)
	// Only the columns the definition reads of the table: capture records
	// those of every transform reading it, and one retyped since (text to
	// integer) would fail the UNION of its recorded and current types.
	read := append(append(append([]string(nil), src.Reads...), src.Needs...), src.KeyCols...)
	if pos == 0 {
		read = append(read, p.Spec.Reads...)
	}
	var old, cur []string
	for i, col := range c.CapCols {
		if len(read) > len(src.KeyCols) && !slices.Contains(read, col) {
			continue
		}
		old = append(old, fromKeyParam(fmt.Sprintf("v%d", i+1), c.CapTypes[i])+" AS "+ident.Quote(col))
		cur = append(cur, ident.Quote(a)+"."+ident.Quote(col))
	}
	if len(old) == 0 {
		old, cur = []string{"NULL AS trellis_none"}, []string{"NULL"}
	}
	parts := c.pick("SELECT "+strings.Join(old, ", ")+" FROM chg WHERE hv",
		"SELECT "+strings.Join(cur, ", ")+" FROM "+p.tableAs(pos)+" WHERE "+c.current(a))
	return "(" + strings.Join(parts, " UNION ") + ") AS " + ident.Quote(a)
}

// unitAt is the position whose values make the target's unit, and their
// expressions: a projection's or join's FROM key, an aggregate's GROUP BY,
// a window's PARTITION BY.
func (p *Plan) unitAt() (int, []string) {
	if !p.UnitIsGroup() {
		return 0, p.srcKey()
	}
	return p.Spec.GroupPos(), p.unitExprs()
}

// AffectedAt finds the target's units (a join's FROM keys, an aggregate's
// groups) that a change of the table at position pos touches, for a join
// of three or more tables: the units of the result rows that hold a
// changed row in its old or current image, found along the join tree from
// the images to the unit's table; and, when the grouped table can be
// NULL-extended, the NULL-extended group (a match appearing or leaving
// anywhere moves rows in or out of it). Returns the units as text and
// their bucket, or "" when the changed keys are the units themselves (a
// join's FROM table).
func (p *Plan) AffectedAt(c Changes, pos, buckets int) string {
	if p.oneUnit() {
		return p.AffectedGroups(c, false, buckets)
	}
	if p.FullUnits() {
		return p.fullAffected(c, pos, buckets)
	}
	at, exprs := p.unitAt()
	if pos == at && !p.UnitIsGroup() {
		return ""
	}
	_, types := p.CheckUnit()
	return p.walkUnits(c, pos, at, exprs, types, p.UnitIsGroup() && p.nullable(at), buckets)
}

// walkUnits is AffectedAt's query: the values of exprs (of the table at
// at) in the result rows that hold a changed row of the table at pos,
// and, with nullUnit, exprs over a NULL-extended row of that table; types
// are the units' types.
func (p *Plan) walkUnits(c Changes, pos, at int, exprs, types []string, nullUnit bool, buckets int) string {
	path := p.treePath(pos, at)
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT %s FROM %s", strings.Join(exprs, ", "), p.images(c, pos))
	for i := 1; i < len(path); i++ {
		fmt.Fprintf(&b, " JOIN %s ON %s", p.tableAs(path[i]), p.edgeOn(path[i-1], path[i]))
	}
	parts := []string{b.String()}
	if nullUnit && c.Part != "old" {
		parts = append(parts, fmt.Sprintf("SELECT %s FROM (SELECT) AS trellis_one LEFT JOIN %s ON false WHERE EXISTS (SELECT FROM chg)",
			strings.Join(exprs, ", "), p.tableAs(at)))
	}
	cols := make([]string, len(exprs))
	for i := range cols {
		cols[i] = fmt.Sprintf("g%d", i+1)
	}
	return fmt.Sprintf("WITH %s SELECT DISTINCT %s FROM (%s) AS grp(%s)", c.cte(), textWithBucket(cols, types, buckets), strings.Join(parts, " UNION "), strings.Join(cols, ", "))
}
