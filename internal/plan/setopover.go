package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/trellistype"
)

// CompileSetOpOver compiles an aggregate over the rows of a set operation
// (decision 0044; UNION, INTERSECT, EXCEPT [ALL] by decision 0050): outer is the statement, reading the set operation as
// its FROM table setOpAlias, and branches, tables are as for
// CompileSetOp. The spec is the aggregate's (its key the GROUP BY
// outputs, none for a global aggregate) over the set operation's derived
// table; a change of a branch's table touches the groups its old and new
// rows give in that branch. It returns the columns of each source whose
// old values capture must record.
func CompileSetOpOver(tree *grammar.SetNode, branches []*grammar.Transform, tables [][]*Table, outer *grammar.Transform) (Spec, [][]string, error) {
	if tree.Op == "" {
		return Spec{}, nil, errs.New(trellistype.CodeValidation, "an aggregate over a set operation reads a set operation of two or more branches")
	}
	for i, b := range branches {
		if branchAggregates(b) {
			return Spec{}, nil, errs.New(trellistype.CodeValidation, "an aggregate over a set operation whose branch %d aggregates (GROUP BY, an aggregate or DISTINCT) is not supported: aggregate the branches' rows in the statement, or define that branch as a transform and read its target", i+1)
		}
	}
	br, joinNeeds, err := compileBranches(branches, tables)
	if err != nil {
		return Spec{}, nil, err
	}
	first := branches[0]
	names := make([]string, len(first.Select))
	rows := &Table{Name: setOpAlias, Alias: setOpAlias, Columns: map[string]string{}}
	for j, it := range first.Select {
		if _, dup := rows.Columns[it.Name]; dup {
			return Spec{}, nil, errs.New(trellistype.CodeValidation, "the set operation has two columns named %s: name each branch 1 output once", it.Name)
		}
		names[j] = it.Name
		rows.Columns[it.Name] = ""
		rows.Order = append(rows.Order, it.Name)
	}
	for i, b := range branches {
		for _, it := range b.Select {
			br[i].Outs = append(br[i].Outs, it.Expr)
		}
	}
	r, err := Resolve(outer, []*Table{rows})
	if err != nil {
		return Spec{}, nil, err
	}
	spec, _, err := Compile(r, []*Table{rows})
	if err != nil {
		return Spec{}, nil, err
	}
	if len(spec.GroupBy) == 0 && !spec.Global || spec.Window != nil {
		return Spec{}, nil, errs.New(trellistype.CodeValidation, "a transform over a set operation's rows aggregates them (GROUP BY, an aggregate or DISTINCT)")
	}
	// The outputs the groups read: a changed row's old image must give
	// them, and a joined branch's must all read one of its tables.
	var groupOuts []int
	for _, c := range r.GroupByColumns {
		if j := slices.Index(names, c.Column); j >= 0 && !slices.Contains(groupOuts, j) {
			groupOuts = append(groupOuts, j)
		}
	}
	slices.Sort(groupOuts)
	for i, b := range branches {
		outerTables := tables[i][:1+len(br[i].Joins)]
		group := -1
		var cols []grammar.ColumnRef
		for _, j := range groupOuts {
			cols = append(cols, b.Select[j].Columns...)
		}
		for _, c := range cols {
			pos, err := tableOf(c, outerTables)
			if err != nil {
				return Spec{}, nil, errs.New(trellistype.CodeValidation, "branch %d of the set operation: %v", i+1, err)
			}
			if group >= 0 && pos != group {
				return Spec{}, nil, errs.New(trellistype.CodeValidation,
					"the columns branch %d of the set operation gives the GROUP BY read two of its tables (%s and %s): the groups of a joined branch must read one of its tables, as GROUP BY over a join does; define the join as a transform and read its target in the branch",
					i+1, tables[i][group].Alias, tables[i][pos].Alias)
			}
			group = pos
			if br[i].Joined() {
				joinNeeds[i][pos] = appendNew(joinNeeds[i][pos], c.Column)
			}
		}
		br[i].Group = max(group, 0)
		for _, g := range spec.GroupBy {
			br[i].Units = append(br[i].Units, unitOf(g, names, groupOuts, br[i].Outs))
		}
	}
	var needs [][]string
	for i, b := range branches {
		if br[i].Joined() {
			for pos, src := range br[i].positions() {
				src.Needs = joinNeeds[i][pos]
			}
			needs = append(needs, joinNeeds[i]...)
			continue
		}
		var reads, need []string
		for j, it := range b.Select {
			for _, c := range it.Columns {
				reads = appendNew(reads, c.Column)
				if slices.Contains(groupOuts, j) {
					need = appendNew(need, c.Column)
				}
			}
		}
		for _, c := range b.WhereColumns {
			reads = appendNew(reads, c.Column)
			if !spec.Global {
				need = appendNew(need, c.Column)
			}
		}
		for _, k := range tables[i][0].KeyCols {
			reads = appendNew(reads, k)
		}
		for _, c := range reads {
			if _, ok := tables[i][0].Columns[c]; !ok {
				return Spec{}, nil, errs.New(trellistype.CodeValidation, "column %s does not exist in %s (branch %d of the set operation)", c, tables[i][0].Alias, i+1)
			}
		}
		// A row's old values give the groups it was in.
		br[i].Source.Reads, br[i].Source.Needs = reads, need
		needs = append(needs, need)
	}
	spec.SetOp = &SetOp{All: true, Outputs: names, Branches: br}
	if !tree.OnlyUnionAll() {
		// The rows of UNION, INTERSECT, EXCEPT [ALL]: each branch's rows
		// counted by value, as a counted set operation's (decision 0050).
		spec.SetOp.All, spec.SetOp.Counted, spec.SetOp.Tree = false, true, tree
	}
	spec.Source = br[0].Source
	spec.Reads = br[0].Source.Reads
	spec.BaseReads, spec.PerColumnReads = nil, false
	for i := range spec.Columns {
		spec.Columns[i].Reads, spec.Columns[i].JoinedReads, spec.Columns[i].MoreReads = nil, nil, nil
	}
	spec.WithoutSourceIndex = outer.WithoutSourceIndex
	return spec, needs, nil
}

// unitOf is a GROUP BY expression g of the set operation's rows as a
// branch computes it from its own tables: the branch's output when g is
// one, else g over a row of the outputs it reads (outs by output).
func unitOf(g string, names []string, read []int, outs []string) string {
	if m := keyColumn.FindStringSubmatch(g); m != nil && (m[1] == "" || m[1] == setOpAlias) {
		if j := slices.Index(names, m[2]); j >= 0 {
			return outs[j]
		}
	}
	var sel []string
	for _, j := range read {
		sel = append(sel, outs[j]+" AS "+ident.Quote(names[j]))
	}
	return fmt.Sprintf("(SELECT %s FROM (SELECT %s) AS %s)", g, strings.Join(sel, ", "), ident.Quote(setOpAlias))
}

// affectedOver is AffectedBranch for an aggregate over a set operation:
// the groups the changed rows' old values and current rows give in
// branch i (walking a joined branch's tree to its Group table), or the
// one group of a global aggregate.
func (p *Plan) affectedOver(c Changes, i, local, buckets int) string {
	if p.oneUnit() {
		return fmt.Sprintf("WITH %s SELECT %s WHERE EXISTS (SELECT FROM chg)", c.cte(), textWithBucket([]string{GlobalKey}, nil, buckets))
	}
	b := p.Spec.SetOp.Branches[i]
	_, types := p.CheckUnit()
	exprs := make([]string, len(b.Units))
	for j, u := range b.Units {
		exprs[j] = u
		if j < len(types) && types[j] != "" {
			exprs[j] = "(" + u + ")::" + types[j]
		}
	}
	if b.Joined() {
		bp := &Plan{Spec: b.spec()}
		return bp.walkUnits(c, local, b.Group, exprs, types, bp.nullable(b.Group), buckets)
	}
	a := aliasOf(b.Source)
	where := ""
	if b.Where != "" {
		where = " AND (" + b.Where + ")"
	}
	old := fmt.Sprintf("SELECT %s FROM %s WHERE true%s", strings.Join(exprs, ", "), c.oldImage(a), where)
	cur := fmt.Sprintf("SELECT %s FROM %s AS %s WHERE %s%s", strings.Join(exprs, ", "),
		ident.Qualified(b.Source.Schema, b.Source.Table), ident.Quote(a), c.currentByKey(a), where)
	cols := make([]string, len(exprs))
	for j := range cols {
		cols[j] = fmt.Sprintf("g%d", j+1)
	}
	return fmt.Sprintf("WITH %s SELECT DISTINCT %s FROM (%s) AS grp(%s)", c.cte(), textWithBucket(cols, types, buckets),
		strings.Join(c.pick(old, cur), " UNION "), strings.Join(cols, ", "))
}
