package plan

import (
	"fmt"

	"github.com/trellis-pg/trellis/internal/ident"
)

// ScratchBuild is the initial build of a join or aggregate through a
// scratch table: the definition's query fills a temporary table with
// CREATE TABLE AS, which PostgreSQL may run with parallel workers (it never
// plans an INSERT ... SELECT in parallel), and the target takes its rows
// from it. It pays when the query reads many more rows than it yields (an
// aggregate): the rows are written twice. The scratch table, named scratch,
// is dropped at commit. Three statements, as ShapeResync's two: the last
// one writes the target.
func (p *Plan) ScratchBuild(scratch string) []string {
	tmp := "pg_temp." + ident.Quote(scratch)
	return []string{
		"DELETE FROM " + p.Target.Quoted(),
		fmt.Sprintf("CREATE TEMPORARY TABLE %s ON COMMIT DROP AS %s", tmp, p.shapeQuery()),
		fmt.Sprintf("INSERT INTO %s (%s) SELECT * FROM %s", p.Target.Quoted(), ident.List(p.columnNamesShape()), tmp),
	}
}

// ExplainShape asks PostgreSQL for its plan of a join or aggregate's
// query, as JSON, without running it (what ScratchBuild's choice reads).
func (p *Plan) ExplainShape() string {
	return "EXPLAIN (FORMAT JSON) " + p.shapeQuery()
}
