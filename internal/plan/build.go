package plan

import (
	"fmt"
	"strings"

	"github.com/trellis-pg/trellis/internal/ident"
)

// ScratchBuild is the initial build of a join or aggregate through a
// scratch table: the definition's query fills a temporary table with
// CREATE TABLE AS, which PostgreSQL may run with parallel workers (it never
// plans an INSERT ... SELECT in parallel), and the target takes its rows
// from it. It pays when the query reads many more rows than it yields (an
// aggregate): the rows are written twice. The scratch table, named scratch,
// is dropped at commit. As ShapeResync's statements, the first empties
// the target and the last one writes it.
func (p *Plan) ScratchBuild(scratch string) []string {
	if p.Partial() {
		return p.partialResync() // its partials are its scratch
	}
	tmp := "pg_temp." + ident.Quote(scratch)
	return []string{
		"DELETE FROM " + p.Target.Quoted(),
		fmt.Sprintf("CREATE TEMPORARY TABLE %s ON COMMIT DROP AS %s", tmp, p.wholeQuery()),
		fmt.Sprintf("INSERT INTO %s (%s) SELECT * FROM %s", p.Target.Quoted(), ident.List(p.columnNamesShape()), tmp),
	}
}

// ExplainShape asks PostgreSQL for its plan of a join or aggregate's
// query, as JSON, without running it (what ScratchBuild's choice reads).
func (p *Plan) ExplainShape() string {
	return "EXPLAIN (FORMAT JSON) " + p.wholeQuery()
}

// EvalAll evaluates a projection over the whole source and writes
// nothing: it fails when some row's evaluation raises.
func (p *Plan) EvalAll() string {
	return fmt.Sprintf("SELECT count(ROW(s.*)) FROM (SELECT %s FROM %s%s) s", p.selectList(), p.from(), p.where())
}

// FailureScan reads a projection's rows in source key order, past the key
// $1.. when hasLower, and returns each one's key as text, its columns
// evaluated as it goes: run with sorting disabled (so the order comes
// from the key's index) and without parallel workers, a row that raises
// stops it right after the keys of the rows before it.
func (p *Plan) FailureScan(hasLower bool) string {
	var conds []string
	if hasLower {
		conds = append(conds, p.srcKeyCmp(">", 1))
	}
	var outs []string
	for i, k := range p.Spec.Source.KeyCols {
		outs = append(outs, textOf("s."+ident.Quote(k), p.Spec.Source.KeyTypes[i]))
	}
	return fmt.Sprintf("SELECT %s, ROW(s.*) IS NULL FROM (SELECT %s FROM %s%s ORDER BY %s) s",
		strings.Join(outs, ", "), p.selectList(), p.from(), p.where(conds...), strings.Join(p.srcKey(), ", "))
}

// NextKey is the source key (as text) of the first row a projection
// selects, past the key $1.. when hasLower.
func (p *Plan) NextKey(hasLower bool) string {
	var conds, outs []string
	if hasLower {
		conds = append(conds, p.srcKeyCmp(">", 1))
	}
	for i, k := range p.srcKey() {
		outs = append(outs, textOf(k, p.Spec.Source.KeyTypes[i]))
	}
	return fmt.Sprintf("SELECT %s FROM %s%s ORDER BY %s LIMIT 1", strings.Join(outs, ", "), p.from(),
		p.where(conds...), strings.Join(p.srcKey(), ", "))
}

// EvalKey evaluates a projection on the row of the source key $1.. and
// writes nothing: it fails when that row's evaluation raises.
func (p *Plan) EvalKey() string {
	return fmt.Sprintf("SELECT count(ROW(s.*)) FROM (SELECT %s FROM %s%s) s", p.selectList(), p.from(),
		p.where(p.srcKeyCmp("=", 1)))
}
