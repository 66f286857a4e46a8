package plan

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/trellistype"
)

// SetOp is the set operation of a UNION [ALL], INTERSECT or EXCEPT
// transform (decision 0032). Its branches are read as one derived table,
// setOpAlias, whose columns the spec's Key, Columns, GroupBy and Window
// name: UNION ALL is recomputed a branch key at a time (a window shape
// without window functions, whose partitions are its keys), the set
// operations without ALL a distinct row at a time (an aggregate grouped
// by every output, whose HAVING says whether the row's presence in the
// branches passes the operation).
type SetOp struct {
	// All says UNION ALL of every branch.
	All bool `json:"all,omitempty"`
	// Counted says the set operation keeps duplicates by count (INTERSECT
	// ALL, EXCEPT ALL, a UNION ALL over a set operation without ALL;
	// decision 0050): a row value is a unit, recomputed from how many
	// times each branch holds it, and its copies are keyed by the value
	// and an ordinal 1..count (OrdinalColumn). Under an aggregate (Over),
	// it says the aggregate reads the rows of a tree other than UNION ALL,
	// derived from the branches' counts the same way.
	Counted bool `json:"counted,omitempty"`
	// Tree is how the branches combine (set operations without ALL).
	Tree     *grammar.SetNode `json:"tree,omitempty"`
	Branches []Branch         `json:"branches"`
	// Outputs are the names of the set operation's columns when the
	// transform aggregates over its rows (decision 0044): the derived
	// table setOpAlias has these columns (each branch's Outs), and the
	// spec's Key, Columns, GroupBy, Where and Having read them.
	Outputs []string `json:"outputs,omitempty"`
}

// plainUnionAll says the set operation is a UNION ALL of branches that
// neither aggregate nor join, not read by an aggregate over it.
func (s *SetOp) plainUnionAll() bool {
	return s.All && !s.Counted && !s.Over() && !s.grouped() && !slices.ContainsFunc(s.Branches, Branch.Joined)
}

// Over says the transform aggregates over the set operation's rows.
func (s *SetOp) Over() bool { return len(s.Outputs) > 0 }

// Branch is one SELECT of a set operation: over one table, or over a
// join of tables (INNER or LEFT, with semi- and anti-joins) whose
// positions are local to the branch (0 its FROM table, then Joins, then
// Semis), as a Spec's are.
type Branch struct {
	Source Source `json:"source"`
	// Joins are the branch's joined tables in order (its JoinList), each
	// joined to the earlier table at To.
	Joins []Join `json:"joins,omitempty"`
	// Semis are the branch's EXISTS/IN subqueries, whose SQL is in Where.
	Semis []Semi `json:"semis,omitempty"`
	Where string `json:"where,omitempty"`
	// Group is the position of the table every output of a joined branch
	// of a set operation without ALL reads: a distinct row's presence in
	// the branch is found through it, as an aggregate's group is.
	Group int `json:"group,omitempty"`
	// Keys and Cols are the branch's expressions for each of Spec.Key and
	// Spec.Columns ("NULL" for a key column of another branch).
	Keys []string `json:"keys"`
	Cols []string `json:"cols,omitempty"`
	// Outs are the branch's expressions for each of SetOp.Outputs, and
	// Units its expressions for each of Spec.GroupBy (reading the table
	// at Group of a joined branch), when the transform aggregates over
	// the set operation.
	Outs  []string `json:"outs,omitempty"`
	Units []string `json:"units,omitempty"`
	// Aggregated says the branch of a UNION ALL aggregates (decision
	// 0044): its rows are its groups, GroupBy and Having its clauses, and
	// Keys after the branch number its GROUP BY outputs.
	Aggregated bool     `json:"aggregated,omitempty"`
	GroupBy    []string `json:"group_by,omitempty"`
	Having     string   `json:"having,omitempty"`
}

// keyMayBeNull says expr is a key column of the branch's FROM table that
// may be NULL (a target read by a UNION ALL, decision 0064).
func (b Branch) keyMayBeNull(expr string) bool {
	for x, k := range b.Source.KeyCols {
		if x < len(b.Source.KeyNulls) && b.Source.KeyNulls[x] && expr == ident.Quote(aliasOf(b.Source))+"."+ident.Quote(k) {
			return true
		}
	}
	return false
}

// Joined says the branch reads more than one table.
func (b Branch) Joined() bool { return len(b.Joins) > 0 || len(b.Semis) > 0 }

// sources are the branch's tables by its positions.
func (b Branch) sources() []Source {
	s := b.spec()
	return s.Sources()
}

// spec is the branch as a definition of its own (its FROM clause, joins,
// semi-joins and WHERE), whose plan walks its join tree.
func (b Branch) spec() Spec {
	s := Spec{Source: b.Source, Semis: b.Semis, Where: b.Where, Reads: b.Source.Reads}
	if len(b.Joins) > 0 {
		j := b.Joins[0]
		s.Join = &j
		s.Joins = b.Joins[1:]
	}
	return s
}

// BranchSpec is branch i of the set operation as a definition of its own:
// what its tables' index needs are found from.
func (s *SetOp) BranchSpec(i int) Spec { return s.Branches[i].spec() }

// branchAt is the branch and its local position of a position of
// Spec.Sources.
func (s *SetOp) branchAt(pos int) (int, int) {
	for i, b := range s.Branches {
		n := 1 + len(b.Joins) + len(b.Semis)
		if pos < n {
			return i, pos
		}
		pos -= n
	}
	return -1, -1
}

// GroupSource is the table whose rows a distinct row of a set operation
// without ALL is found through in this branch (its first output's).
func (b Branch) GroupSource() Source { return b.sources()[b.Group] }

// SetIDs sets the ID of every branch's tables: id gives the ID of the
// table at a position of Spec.Sources.
func (s *SetOp) SetIDs(id func(pos int) int) {
	pos := 0
	for i := range s.Branches {
		for _, src := range s.Branches[i].positions() {
			src.ID = id(pos)
			pos++
		}
	}
}

// positions are pointers to the branch's tables by its positions.
func (b *Branch) positions() []*Source {
	out := []*Source{&b.Source}
	for k := range b.Joins {
		out = append(out, &b.Joins[k].Source)
	}
	for k := range b.Semis {
		out = append(out, &b.Semis[k].Source)
	}
	return out
}

// setOpAlias names the derived table of a set operation's branches.
const setOpAlias = grammar.SetOpAlias

// BranchColumn is the column of a UNION ALL target that says which
// branch (1 for the first) a row comes from; setBranchMarker is its
// counterpart inside the derived table of a set operation without ALL.
const (
	BranchColumn    = "branch"
	setBranchMarker = "trellis_branch"
)

func setCol(name string) string { return ident.Quote(setOpAlias) + "." + ident.Quote(name) }

// CompileSetOp compiles a set operation: branches are its SELECTs (the
// first is the statement itself), resolved, and tables each branch's
// tables (its FROM table, the joined ones, then its subqueries'). It
// returns the columns of each of the spec's sources (Spec.Sources) whose
// old values capture must record.
func CompileSetOp(tree *grammar.SetNode, branches []*grammar.Transform, tables [][]*Table, withoutSourceIndex bool) (Spec, [][]string, error) {
	first := branches[0]
	spec := Spec{WithoutSourceIndex: withoutSourceIndex, SetOp: &SetOp{All: tree.OnlyUnionAll(), Counted: tree.Counted()}}
	var joinNeeds [][][]string
	var err error
	if spec.SetOp.Branches, joinNeeds, err = compileBranches(branches, tables); err != nil {
		return spec, nil, err
	}
	names := make([]string, len(first.Select))
	for j, it := range first.Select {
		names[j] = it.Name
	}
	br := spec.SetOp.Branches
	outer := func(i int) []*Table { return tables[i][:1+len(br[i].Joins)] }
	aggregated := slices.ContainsFunc(branches, branchAggregates)
	if aggregated {
		if err := compileAggregatedBranches(&spec, tree, branches, tables, names); err != nil {
			return spec, nil, err
		}
	} else if spec.SetOp.All {
		if slices.Contains(names, BranchColumn) {
			return spec, nil, errs.New(trellistype.CodeValidation, "the output name %s is taken: a UNION ALL target has a column %s saying which branch a row comes from; rename that output", BranchColumn, BranchColumn)
		}
		spec.Key = append(spec.Key, Column{Name: BranchColumn, Expr: setCol(BranchColumn)})
		for i := range br {
			br[i].Keys = append(br[i].Keys, fmt.Sprintf("%d::smallint", i+1))
		}
		// An output that is a key column of its (FROM) table in every
		// branch serves as that key column.
		served := make([]map[string]bool, len(br))
		for i := range served {
			served[i] = map[string]bool{}
		}
		shared := map[int]bool{}
		for j := range first.Select {
			cols := make([]string, len(br))
			for i, b := range branches {
				it := b.Select[j]
				for _, k := range tables[i][0].KeyCols {
					if isColumn(it, tables[i][0], k, outer(i)) && !served[i][k] {
						cols[i] = k
					}
				}
			}
			if slices.Contains(cols, "") {
				continue
			}
			shared[j] = true
			spec.Key = append(spec.Key, Column{Name: names[j], Expr: setCol(names[j])})
			for i, b := range branches {
				served[i][cols[i]] = true
				br[i].Keys = append(br[i].Keys, b.Select[j].Expr)
			}
		}
		// Every other key column is added as <alias>_<column>, NULL in
		// the other branches' rows; branches whose added columns have one
		// name and type share it. The FROM tables' come first: with the
		// branch they are a row's unit (the partition a change
		// recomputes); a joined table's follow.
		slot := map[string]int{}
		slotType := map[string]string{}
		addSlot := func(i int, t *Table, k, typ string) error {
			name := t.Alias + "_" + k
			if slices.Contains(names, name) || name == BranchColumn {
				return errs.New(trellistype.CodeValidation, "column %s is taken: the target needs it for the key column %s of branch %d; select the key column in every branch, or rename that output", name, k, i+1)
			}
			if at, ok := slot[name]; ok {
				if slotType[name] != typ {
					return errs.New(trellistype.CodeValidation, "the key columns %s of two branches have different types (%s, %s): give the tables different aliases", name, slotType[name], typ)
				}
				if br[i].Keys[at] != "NULL" {
					return errs.New(trellistype.CodeValidation, "two tables of branch %d need the key column %s: give them different aliases", i+1, name)
				}
				br[i].Keys[at] = ident.Quote(t.Alias) + "." + ident.Quote(k)
				return nil
			}
			slot[name], slotType[name] = len(spec.Key), typ
			spec.Key = append(spec.Key, Column{Name: name, Expr: setCol(name)})
			for x := range br {
				e := "NULL"
				if x == i {
					e = ident.Quote(t.Alias) + "." + ident.Quote(k)
				}
				br[x].Keys = append(br[x].Keys, e)
			}
			return nil
		}
		for i := range br {
			t := tables[i][0]
			for c, k := range t.KeyCols {
				if served[i][k] {
					continue
				}
				if err := addSlot(i, t, k, t.KeyTypes[c]); err != nil {
					return spec, nil, err
				}
			}
		}
		units := len(spec.Key)
		for i := range br {
			for _, t := range outer(i)[1:] {
				for c, k := range t.KeyCols {
					if at, ok := slot[t.Alias+"_"+k]; ok && at < units {
						return spec, nil, errs.New(trellistype.CodeValidation, "the key column %s_%s of branch %d's joined table %s is another branch's FROM key column: give the tables different aliases", t.Alias, k, i+1, t.Alias)
					}
					if err := addSlot(i, t, k, t.KeyTypes[c]); err != nil {
						return spec, nil, err
					}
				}
			}
		}
		for j := range first.Select {
			if shared[j] {
				continue
			}
			spec.Columns = append(spec.Columns, Column{Name: names[j], Expr: setCol(names[j])})
			for i, b := range branches {
				br[i].Cols = append(br[i].Cols, b.Select[j].Expr)
			}
		}
		var part []string
		for _, k := range spec.Key[:units] {
			part = append(part, k.Expr)
		}
		spec.Window = &Window{Partition: part}
	} else {
		// Each distinct row once: the row is the key. Counted, the row
		// value is the unit and its copies are numbered (decision 0050).
		counted := spec.SetOp.Counted
		if counted && slices.Contains(names, OrdinalColumn) {
			return spec, nil, errs.New(trellistype.CodeValidation, "the output name %s is taken: the target of %s has a column %s numbering a row's copies; rename that output", OrdinalColumn, countedWhat(tree), OrdinalColumn)
		}
		var part []string
		for j, n := range names {
			spec.Key = append(spec.Key, Column{Name: n, Expr: setCol(n)})
			part = append(part, setCol(n))
			if !counted {
				spec.GroupBy = append(spec.GroupBy, setCol(n))
			}
			for i, b := range branches {
				br[i].Keys = append(br[i].Keys, b.Select[j].Expr)
			}
		}
		if counted {
			spec.Key = append(spec.Key, Column{Name: OrdinalColumn, Expr: setCol(OrdinalColumn)})
			spec.Window = &Window{Partition: part}
		}
		// A joined branch's distinct rows are found through the one table
		// its outputs read, as an aggregate's groups are (decision 0040).
		for i, b := range branches {
			if !br[i].Joined() {
				continue
			}
			group := -1
			for _, it := range b.Select {
				for _, c := range it.Columns {
					pos, err := tableOf(c, outer(i))
					if err != nil {
						return spec, nil, errs.New(trellistype.CodeValidation, "branch %d of the set operation: %v", i+1, err)
					}
					if group >= 0 && pos != group {
						return spec, nil, errs.New(trellistype.CodeValidation,
							"the outputs of branch %d of the set operation read two of its tables (%s and %s): without ALL, a joined branch's outputs must read one of its tables, as GROUP BY over a join does; use UNION ALL, or define the join as a transform and read its target in the branch",
							i+1, tables[i][group].Alias, tables[i][pos].Alias)
					}
					group = pos
					joinNeeds[i][pos] = appendNew(joinNeeds[i][pos], c.Column)
				}
			}
			br[i].Group = max(group, 0)
		}
		spec.SetOp.Tree = tree
		if !counted {
			spec.Having = presence(tree)
		}
	}
	var needs [][]string
	for i, b := range branches {
		if br[i].Joined() {
			// The joined branch's tables, with the old values its walks
			// need (ON columns, and without ALL its outputs').
			for pos, src := range br[i].positions() {
				src.Needs = joinNeeds[i][pos]
			}
			needs = append(needs, joinNeeds[i]...)
			continue
		}
		var reads []string
		for _, it := range b.Select {
			for _, c := range it.Columns {
				reads = appendNew(reads, c.Column)
			}
		}
		for _, c := range b.WhereColumns {
			reads = appendNew(reads, c.Column)
		}
		for _, k := range tables[i][0].KeyCols {
			reads = appendNew(reads, k)
		}
		for _, r := range reads {
			if _, ok := tables[i][0].Columns[r]; !ok {
				return spec, nil, errs.New(trellistype.CodeValidation, "column %s does not exist in %s (branch %d of the set operation)", r, tables[i][0].Alias, i+1)
			}
		}
		br[i].Source.Reads = reads
		var need []string
		switch {
		case br[i].Aggregated:
			// A row's old values give the groups it was in.
			for _, c := range append(slices.Clone(b.GroupByColumns), b.WhereColumns...) {
				need = appendNew(need, c.Column)
			}
		case !spec.SetOp.All, spec.SetOp.grouped():
			// A plain branch beside aggregating ones: a row's old values
			// give its key (outputs in the groups' positions, decision
			// 0056); without ALL the distinct rows it was part of.
			need = reads
		}
		br[i].Source.Needs = need
		needs = append(needs, need)
	}
	spec.Source = br[0].Source
	spec.Reads = br[0].Source.Reads
	return spec, needs, nil
}

// branchAggregates says a branch aggregates: GROUP BY, HAVING, an
// aggregate, or DISTINCT (a GROUP BY of its outputs once resolved).
func branchAggregates(b *grammar.Transform) bool { return b.Aggregated() || b.Distinct }

// compileAggregatedBranches sets the key and columns of a UNION ALL whose
// branches aggregate (decision 0044): a row is one group of one branch,
// keyed by the branch and its GROUP BY outputs, which every aggregating
// branch must select in the same positions (none for aggregates without
// GROUP BY: a row per branch). Its unit is the whole key: a change of a
// branch's table recomputes the groups of its old and new rows in that
// branch. A plain branch among them (decision 0056) reads one table and
// selects outputs in those positions too; its rows add its table's key
// columns to the key (<alias>_<column>, NULL in the other branches'
// rows), and a change recomputes the keys of its old and new rows.
func compileAggregatedBranches(spec *Spec, tree *grammar.SetNode, branches []*grammar.Transform, tables [][]*Table, names []string) error {
	br := spec.SetOp.Branches
	if !tree.OnlyUnionAll() {
		return errs.New(trellistype.CodeValidation, "GROUP BY, HAVING, an aggregate or DISTINCT in a branch of a UNION, INTERSECT or EXCEPT is not supported: use UNION ALL of the branches alone (each branch's groups kept), or define the aggregating branches as transforms and read their targets in the branches")
	}
	if slices.Contains(names, BranchColumn) {
		return errs.New(trellistype.CodeValidation, "the output name %s is taken: a UNION ALL target has a column %s saying which branch a row comes from; rename that output", BranchColumn, BranchColumn)
	}
	first := []int(nil)
	seen := false
	firstAt := 0 // the first aggregating branch
	for i, b := range branches {
		if !branchAggregates(b) {
			if br[i].Joined() {
				return errs.New(trellistype.CodeValidation, "branch %d of the UNION ALL joins tables without aggregating, and another branch aggregates: a plain branch beside aggregating ones reads one table (its rows are keyed by its key); define the join as a transform and read its target in the branch, or aggregate the branch (GROUP BY its key columns)", i+1)
			}
			continue
		}
		var pos []int
		for _, g := range b.GroupBy {
			idx := slices.IndexFunc(b.Select, func(it grammar.SelectItem) bool { return it.Expr == g })
			if idx < 0 {
				return errs.New(trellistype.CodeValidation, "GROUP BY expression %s of branch %d must also be selected: with the branch it is the target's key", g, i+1)
			}
			pos = append(pos, idx)
		}
		slices.Sort(pos)
		if !seen {
			first, seen, firstAt = pos, true, i
		} else if !slices.Equal(pos, first) {
			return errs.New(trellistype.CodeValidation, "branch %d of the UNION ALL groups by other outputs than branch %d (outputs %v, branch %d's %v): every branch groups by the outputs in the same positions, which with the branch are the target's key", i+1, firstAt+1, plusOne(pos), firstAt+1, plusOne(first))
		}
	}
	spec.Key = append(spec.Key, Column{Name: BranchColumn, Expr: setCol(BranchColumn)})
	for _, j := range first {
		spec.Key = append(spec.Key, Column{Name: names[j], Expr: setCol(names[j])})
	}
	for j, n := range names {
		if !slices.Contains(first, j) {
			spec.Columns = append(spec.Columns, Column{Name: n, Expr: setCol(n)})
		}
	}
	for i, b := range branches {
		br[i].Aggregated, br[i].GroupBy, br[i].Having = branchAggregates(b), b.GroupBy, b.Having
		br[i].Keys = append(br[i].Keys, fmt.Sprintf("%d::smallint", i+1))
		for _, j := range first {
			br[i].Keys = append(br[i].Keys, b.Select[j].Expr)
		}
		for j, it := range b.Select {
			if !slices.Contains(first, j) {
				br[i].Cols = append(br[i].Cols, it.Expr)
			}
		}
		for _, c := range b.GroupByColumns {
			if br[i].Joined() {
				break // compiled as a GROUP BY over its join (compileBranches)
			}
			if _, ok := tables[i][0].Columns[c.Column]; !ok {
				return errs.New(trellistype.CodeValidation, "column %s does not exist in %s (branch %d of the set operation)", c.Column, tables[i][0].Alias, i+1)
			}
		}
	}
	// A plain branch's rows are told apart by its table's key: a column
	// <alias>_<column> for each key column, shared by plain branches
	// whose column has that name and type, NULL in other branches' rows.
	slot := map[string]int{}
	slotType := map[string]string{}
	for i := range branches {
		if br[i].Aggregated {
			continue
		}
		t := tables[i][0]
		for c, k := range t.KeyCols {
			name := t.Alias + "_" + k
			if slices.Contains(names, name) || name == BranchColumn {
				return errs.New(trellistype.CodeValidation, "column %s is taken: the target needs it for the key column %s of branch %d, which does not aggregate; rename that output", name, k, i+1)
			}
			expr := ident.Quote(t.Alias) + "." + ident.Quote(k)
			if at, ok := slot[name]; ok {
				if slotType[name] != t.KeyTypes[c] {
					return errs.New(trellistype.CodeValidation, "the key columns %s of two branches have different types (%s, %s): give the tables different aliases", name, slotType[name], t.KeyTypes[c])
				}
				br[i].Keys[at] = expr
				continue
			}
			slot[name], slotType[name] = len(spec.Key), t.KeyTypes[c]
			spec.Key = append(spec.Key, Column{Name: name, Expr: setCol(name)})
			for x := range br {
				e := "NULL"
				if x == i {
					e = expr
				}
				br[x].Keys = append(br[x].Keys, e)
			}
		}
	}
	var part []string
	for _, k := range spec.Key {
		part = append(part, k.Expr)
	}
	spec.Window = &Window{Partition: part}
	return nil
}

// grouped says the set operation is a UNION ALL with aggregating
// branches (decision 0044), whose plain branches are keyed by their rows'
// outputs in the groups' positions and their key (decision 0056).
func (s *SetOp) grouped() bool {
	return slices.ContainsFunc(s.Branches, func(b Branch) bool { return b.Aggregated })
}

// plusOne are output positions counted from 1.
func plusOne(pos []int) []int {
	out := make([]int, len(pos))
	for i, p := range pos {
		out[i] = p + 1
	}
	return out
}

// compileBranches compiles each branch's FROM table, or its join as a
// definition of its own (ON conditions, semi-joins), and returns the old
// values each joined branch's walks need, by the branch's positions.
func compileBranches(branches []*grammar.Transform, tables [][]*Table) ([]Branch, [][][]string, error) {
	first := branches[0]
	var out []Branch
	joinNeeds := make([][][]string, len(branches))
	for i, b := range branches {
		if len(b.Select) != len(first.Select) {
			return nil, nil, errs.New(trellistype.CodeValidation, "branch %d of the set operation has %d columns and branch 1 has %d: each branch must select as many", i+1, len(b.Select), len(first.Select))
		}
		for _, t := range tables[i] {
			if t.Alias == setOpAlias {
				return nil, nil, errs.New(trellistype.CodeValidation, "the alias %s is Trellis's own: give the table of branch %d another alias", setOpAlias, i+1)
			}
		}
		t := tables[i][0]
		br := Branch{Where: b.Where, Source: Source{Schema: t.Schema, Table: t.Name, Alias: b.From.Alias, KeyCols: t.KeyCols, KeyTypes: t.KeyTypes, KeyNulls: t.KeyNulls}}
		if len(tables[i]) > 1 {
			bs, needs, err := Compile(b, tables[i])
			if err != nil {
				return nil, nil, errs.New(trellistype.CodeValidation, "branch %d of the set operation: %v", i+1, err)
			}
			if (&Plan{Spec: bs}).Full() {
				return nil, nil, errs.New(trellistype.CodeValidation, "a FULL JOIN, or a RIGHT JOIN after the second table, in branch %d of a set operation is not supported: define that join as a transform and read its target in the branch", i+1)
			}
			br.Source, br.Where, br.Semis = bs.Source, bs.Where, bs.Semis
			if branchAggregates(b) {
				// An aggregating branch over a join: its groups read one
				// of its tables, reached from a change of any other by
				// walking the join, as GROUP BY over a join is.
				br.Group = bs.GroupPos()
			}
			br.Source.Reads = bs.Reads
			for _, j := range bs.JoinList() {
				br.Joins = append(br.Joins, *j)
			}
			joinNeeds[i] = needs
		}
		out = append(out, br)
	}
	return out, joinNeeds, nil
}

// presence is the HAVING condition of a set operation without ALL: a
// distinct row is kept when its presence in each branch passes the tree
// (UNION: in either, INTERSECT: in both, EXCEPT: in the left, not the
// right). "" for a tree of UNIONs, which keeps every row.
func presence(tree *grammar.SetNode) string {
	var onlyUnion func(*grammar.SetNode) bool
	onlyUnion = func(n *grammar.SetNode) bool {
		return n.Op == "" || (n.Op == grammar.SetUnion && onlyUnion(n.Left) && onlyUnion(n.Right))
	}
	if onlyUnion(tree) {
		return ""
	}
	if tree.HasCounts() {
		// A row's presence is a count above zero.
		return "(" + copies(tree) + ") > 0"
	}
	var walk func(*grammar.SetNode) string
	walk = func(n *grammar.SetNode) string {
		switch n.Op {
		case grammar.SetUnion:
			return "(" + walk(n.Left) + " OR " + walk(n.Right) + ")"
		case grammar.SetIntersect:
			return "(" + walk(n.Left) + " AND " + walk(n.Right) + ")"
		case grammar.SetExcept:
			return "(" + walk(n.Left) + " AND NOT " + walk(n.Right) + ")"
		}
		return fmt.Sprintf("bool_or(%s = %d)", setCol(setBranchMarker), n.Branch)
	}
	return walk(tree)
}

// OrdinalColumn is the key column that numbers the copies of a row of a
// set operation that keeps duplicates by count (1 to the row's count).
const OrdinalColumn = "ordinal"

// countedWhat names the operator of a counted set operation for messages.
func countedWhat(tree *grammar.SetNode) string {
	switch {
	case tree.Op == grammar.SetIntersect:
		return "INTERSECT ALL"
	case tree.Op == grammar.SetExcept:
		return "EXCEPT ALL"
	}
	return "UNION ALL over a set operation"
}

// copies is how many times a row value is in the rows of tree, as an
// expression over the rows of every branch grouped by the value (the
// derived table's marker says each row's branch): a branch's count,
// UNION ALL the sum, INTERSECT ALL the least, EXCEPT ALL the difference
// when positive, and without ALL 1 when the value is present.
func copies(n *grammar.SetNode) string {
	if n.Op == "" {
		return fmt.Sprintf("count(*) FILTER (WHERE %s = %d)", ident.Quote(setBranchMarker), n.Branch)
	}
	l, r := copies(n.Left), copies(n.Right)
	switch {
	case n.Op == grammar.SetUnion && n.All:
		return "(" + l + " + " + r + ")"
	case n.Op == grammar.SetIntersect && n.All:
		return "least(" + l + ", " + r + ")"
	case n.Op == grammar.SetExcept && n.All:
		return "greatest(" + l + " - " + r + ", 0)"
	case n.Op == grammar.SetUnion:
		return "(CASE WHEN " + l + " > 0 OR " + r + " > 0 THEN 1 ELSE 0 END)"
	case n.Op == grammar.SetIntersect:
		return "(CASE WHEN " + l + " > 0 AND " + r + " > 0 THEN 1 ELSE 0 END)"
	}
	return "(CASE WHEN " + l + " > 0 AND " + r + " = 0 THEN 1 ELSE 0 END)"
}

// countedRows is the derived table of a counted set operation's rows:
// the rows of every branch (parts, each with its marker) grouped by the
// row value (names), each value repeated as many times as the tree's
// counts say and numbered 1..count in OrdinalColumn (ordinal: else the
// copies are not numbered, for an aggregate reading them).
func countedRows(parts []string, names []string, tree *grammar.SetNode, ordinal bool) string {
	outer := make([]string, len(names))
	for i, n := range names {
		outer[i] = "trellis_c." + ident.Quote(n)
	}
	sel := strings.Join(outer, ", ")
	if ordinal {
		sel += ", trellis_n.n AS " + ident.Quote(OrdinalColumn)
	}
	return fmt.Sprintf("(SELECT %s FROM %s AS trellis_c CROSS JOIN LATERAL generate_series(1::bigint, trellis_c.trellis_count) AS trellis_n(n)) AS %s",
		sel, countedValues(parts, names, tree), ident.Quote(setOpAlias))
}

// countedValues is the derived table of a counted set operation's row
// values, each once with its count (trellis_count, 0 for a value every
// branch holds but the tree keeps no copy of): the rows of every branch
// (parts, each with its marker) grouped by the value (names).
func countedValues(parts []string, names []string, tree *grammar.SetNode) string {
	cols := ident.List(names)
	return fmt.Sprintf("(SELECT %s, %s AS trellis_count FROM (%s) AS trellis_b GROUP BY %s)",
		cols, copies(tree), strings.Join(parts, " UNION ALL "), cols)
}

// setOpFrom is the derived table of a set operation's branches, each
// output cast to its column's type once the target has recorded it (so
// that PostgreSQL reads the branches as one appended relation); a paused
// column is NULL in every branch.
func (p *Plan) setOpFrom() string {
	so := p.Spec.SetOp
	parts := p.setOpParts()
	if so.Counted {
		return countedRows(parts, p.countedNames(), so.Tree, !so.Over())
	}
	return "(" + strings.Join(parts, " UNION ALL ") + ") AS " + ident.Quote(setOpAlias)
}

// countedNames are the columns whose values a counted set operation
// counts: its outputs (an aggregate over it reads them) or its target's
// key before the ordinal.
func (p *Plan) countedNames() []string {
	so := p.Spec.SetOp
	if so.Over() {
		return so.Outputs
	}
	return p.KeyNames()[:len(so.Branches[0].Keys)]
}

// setOpParts are the SELECTs of a set operation's branches (setOpFrom).
func (p *Plan) setOpParts() []string {
	return p.branchSelects(p.setOpMarker(), p.mergesScans())
}

// branchSelects are the SELECTs of a set operation's branches, each with
// its number in the marker column when marker, the branches of one table
// read in one scan when merge (SetOp.scanGroups; else one SELECT a
// branch, in order).
func (p *Plan) branchSelects(marker, merge bool) []string {
	return p.branchSelectsWhere(marker, merge, nil)
}

// branchSelectsWhere are branchSelects, each branch i also kept to the
// rows that extra(i) holds for (nil, or "": every row).
func (p *Plan) branchSelectsWhere(marker, merge bool, extra func(i int) string) []string {
	so := p.Spec.SetOp
	groups := so.scanGroups(merge)
	parts := make([]string, 0, len(so.Branches))
	for i, b := range so.Branches {
		group := groups[i]
		if len(group) == 0 {
			continue // read by the scan of its group's first branch
		}
		var sel []string
		out := func(expr string, c Column) {
			if c.Paused && c.Type != "" {
				expr = "NULL"
			}
			if c.Type != "" {
				expr = "(" + expr + ")::" + c.Type
			} else if i == 0 && expr == "NULL" {
				expr = "NULL::" + p.slotType(c)
			}
			sel = append(sel, expr+" AS "+ident.Quote(c.Name))
		}
		if so.Over() {
			// The set operation's own columns, which the aggregate reads.
			for j, name := range so.Outputs {
				sel = append(sel, b.Outs[j]+" AS "+ident.Quote(name))
			}
		}
		for j, k := range p.Spec.Key {
			if so.Over() || j == len(b.Keys) {
				break // a counted row's ordinal is numbered below
			}
			out(b.Keys[j], k)
		}
		for j, c := range p.Spec.Columns {
			if so.Over() {
				break
			}
			out(b.Cols[j], c)
		}
		if marker && len(group) > 1 {
			sel = append(sel, "trellis_m.b AS "+ident.Quote(setBranchMarker))
		} else if marker {
			sel = append(sel, fmt.Sprintf("%d AS %s", i+1, ident.Quote(setBranchMarker)))
		}
		where := ""
		if b.Where != "" {
			where = " WHERE (" + b.Where + ")"
		}
		from := ident.Qualified(b.Source.Schema, b.Source.Table) + " AS " + ident.Quote(aliasOf(b.Source))
		if len(group) > 1 {
			from, where = so.groupScan(from, group)
		}
		if b.Joined() {
			bp := &Plan{Spec: b.spec()}
			from = bp.fromClause()
		}
		if extra != nil {
			if c := extra(i); c != "" && where == "" {
				where = " WHERE " + c
			} else if c != "" {
				where += " AND " + c
			}
		}
		if len(b.GroupBy) > 0 {
			where += " GROUP BY " + strings.Join(b.GroupBy, ", ")
		}
		if b.Having != "" {
			where += " HAVING (" + b.Having + ")"
		}
		parts = append(parts, fmt.Sprintf("SELECT %s FROM %s%s", strings.Join(sel, ", "), from, where))
	}
	return parts
}

// setRows says a set operation's rows are PostgreSQL's own set operation
// of its branches: no ALL anywhere in its tree, no aggregate over it, and
// every output in the target's key (each distinct row once).
func (p *Plan) setRows() bool {
	so := p.Spec.SetOp
	if so == nil || so.All || so.Counted || so.Over() || so.Tree == nil || len(p.Spec.Columns) > 0 || p.Spec.Window != nil {
		return false
	}
	var noAll func(n *grammar.SetNode) bool
	noAll = func(n *grammar.SetNode) bool {
		return n.Op == "" || !n.All && noAll(n.Left) && noAll(n.Right)
	}
	return noAll(so.Tree)
}

// setRowsQuery is the rows of a set operation setRows says PostgreSQL
// computes itself: its branches combined by UNION, INTERSECT and EXCEPT
// as the tree says, which reads each branch once and compares whole rows
// (NULLs equal, as GROUP BY does), where the keyed statements' query
// groups the marked union of the branches by every output and keeps a
// row by its HAVING (presence). The whole-target statements (a build, a
// resync) write it: at 1M rows an EXCEPT took 11 s that way against 8 s.
func (p *Plan) setRowsQuery() string {
	parts := p.branchSelects(false, false)
	var walk func(n *grammar.SetNode, top bool) string
	walk = func(n *grammar.SetNode, top bool) string {
		if n.Op == "" {
			if top {
				return parts[n.Branch-1]
			}
			return "(" + parts[n.Branch-1] + ")"
		}
		q := walk(n.Left, false) + " " + strings.ToUpper(string(n.Op)) + " " + walk(n.Right, false)
		if top {
			return q
		}
		return "(" + q + ")"
	}
	return walk(p.Spec.SetOp.Tree, true)
}

// scanGroups are, by branch, the branches read in one scan of their
// table with it: the branches of a set operation without ALL that read
// one table under one name, with no join, aggregate or GROUP BY, and
// yield the same expressions (INTERSECT or EXCEPT of one table's rows,
// as SELECT id, v FROM t WHERE a INTERSECT SELECT id, v FROM t WHERE b;
// not one that keeps copies by count). A group is listed at its first
// branch; the others have none, and a branch read alone is a group of
// one. Read apart, each branch probed the table's index once per unit of
// a page, and found the same row again (decision 0057). Without merge
// every branch is read alone: the rows must carry their branch's number
// (setOpMarker), which tells a group's rows apart, and the statements
// must run with nested loops on (a group's scan is one: PlannerSettings
// turns them off for a unit of one column).
func (s *SetOp) scanGroups(merge bool) [][]int {
	out := make([][]int, len(s.Branches))
	head := make([]int, len(s.Branches))
	for i, b := range s.Branches {
		head[i] = i
		if merge && !s.All && !s.Counted && !s.Over() && s.scansAlone(b) {
			for j := 0; j < i; j++ {
				if head[j] == j && s.scansAlone(s.Branches[j]) && sameScan(s.Branches[j], b) {
					head[i] = j
					break
				}
			}
		}
		out[head[i]] = append(out[head[i]], i)
	}
	return out
}

// scansAlone says a branch reads its one table row by row: no join,
// semi-join, aggregate or GROUP BY.
func (s *SetOp) scansAlone(b Branch) bool {
	return !b.Joined() && !b.Aggregated && len(b.GroupBy) == 0 && b.Having == ""
}

// sameScan says two branches read the same table under the same name
// and yield the same expressions.
func sameScan(a, b Branch) bool {
	return a.Source.Schema == b.Source.Schema && a.Source.Table == b.Source.Table && aliasOf(a.Source) == aliasOf(b.Source) &&
		slices.Equal(a.Keys, b.Keys) && slices.Equal(a.Cols, b.Cols) && slices.Equal(a.Outs, b.Outs)
}

// groupScan is the FROM and WHERE clauses of a group of branches read in
// one scan of their table (from): each row is paired with each branch's
// number (trellis_m.b, its marker) and kept where that branch's WHERE
// holds, a CASE so that each condition is evaluated only for its own
// branch, as when the branches were read apart. A condition on the
// group's outputs (a page's unit) is one on the table alone, so an index
// on it serves the scan.
func (s *SetOp) groupScan(from string, group []int) (string, string) {
	vals := make([]string, len(group))
	var when strings.Builder
	for k, i := range group {
		vals[k] = fmt.Sprintf("(%d)", i+1)
		w := "true"
		if s.Branches[i].Where != "" {
			w = "(" + s.Branches[i].Where + ")"
		}
		fmt.Fprintf(&when, " WHEN %d THEN %s", i+1, w)
	}
	return fmt.Sprintf("%s CROSS JOIN (VALUES %s) AS trellis_m(b)", from, strings.Join(vals, ", ")),
		" WHERE CASE trellis_m.b" + when.String() + " END"
}

// groupWhere is the condition a row of a group of branches read in one
// scan (scanGroups) meets to be in one of them at least: the OR of their
// WHEREs, "" when one has none.
func (s *SetOp) groupWhere(group []int) string {
	var ws []string
	for _, i := range group {
		w := s.Branches[i].Where
		if w == "" {
			return ""
		}
		ws = append(ws, "("+w+")")
	}
	return strings.Join(ws, " OR ")
}

// branchProbes says the keyed recompute reads each branch's units of a
// page in one scan (branchProbeQuery, branchKeys), not unit by unit
// (byUnits, decision 0048): a UNION ALL of plain or joined branches, none
// aggregating and each read alone, whose unit is the branch's number and
// one key column every branch fills with its FROM table's key (never
// NULL), of a type an array holds as scalars. The branch's number is a
// constant in each branch, so a page's units of branch i are a set of
// keys: "key = ANY (the page's keys of branch i)" is one index scan of
// the branch's table and one of the target's key index (branch = i AND
// key = ANY ...), where each unit probed every branch's index on its own,
// and found nothing in the branches whose WHERE its row fails (half of
// union_join's units, decision 0061).
func (p *Plan) branchProbes() bool {
	so := p.Spec.SetOp
	if so == nil || !so.All || so.Counted || so.Over() || so.grouped() || !p.multiUnit() || p.Spec.Window.Rank != "" {
		return false
	}
	if len(p.unitExprs()) != 2 || p.Spec.Key[0].Name != BranchColumn || p.Spec.Key[1].Type == "" || isArrayType(p.Spec.Key[1].Type) {
		return false
	}
	if slices.Contains(p.unitNullable(), true) {
		return false
	}
	for i, g := range so.scanGroups(p.mergesScans()) {
		if len(g) != 1 || g[0] != i || so.Branches[i].Aggregated || so.Branches[i].Keys[0] != fmt.Sprintf("%d::smallint", i+1) {
			return false
		}
	}
	return true
}

// branchKeys is the condition that expr (a branch's key, or the
// target's key column) is one of the page's keys of branch i
// (branchProbes): the groups CTE g, columns gcols, holds the units.
// The keys are an array computed once (an initplan), so an index scan
// takes them as its condition.
func (p *Plan) branchKeys(i int, expr string, gcols []string) string {
	o := opAt(p.keyOps(), 1)
	return anyOf(expr, fmt.Sprintf("ARRAY(SELECT %s FROM g WHERE g.%s = %d::smallint)", o.side("g."+gcols[1]), gcols[0], i+1), o)
}

// branchProbeQuery is the definition's rows for a page's units when
// branchProbes holds: each branch reads its own keys of the page
// (branchKeys of its key expression, typed as the target's key column).
func (p *Plan) branchProbeQuery(gcols []string) string {
	so := p.Spec.SetOp
	k := p.Spec.Key[1]
	parts := p.branchSelectsWhere(p.setOpMarker(), p.mergesScans(), func(i int) string {
		return p.branchKeys(i, "("+so.Branches[i].Keys[1]+")::"+k.Type, gcols)
	})
	from := "(" + strings.Join(parts, " UNION ALL ") + ") AS " + ident.Quote(setOpAlias)
	return fmt.Sprintf("SELECT %s FROM %s%s%s", p.shapeSelect(), from, p.where(), p.groupBy())
}

// setOpMarker says the rows of the set operation's branches carry their
// branch's number (setBranchMarker): a presence test (HAVING) or counts
// read it.
func (p *Plan) setOpMarker() bool {
	so := p.Spec.SetOp
	return (p.Spec.Having != "" && !so.Over()) || so.Counted
}

// mergesScans says branches of one table may be read in one scan
// (SetOp.scanGroups): the rows carry their branch's number, and the keyed
// recompute probes units of several columns, with nested loops on.
func (p *Plan) mergesScans() bool {
	return p.setOpMarker() && p.multiUnit()
}

// slotType is the type of an added key column before the target records
// it: the key type of the branch whose column it is (the first branch's
// NULL there would otherwise be text).
func (p *Plan) slotType(c Column) string {
	j := slices.IndexFunc(p.Spec.Key, func(k Column) bool { return k.Name == c.Name })
	for _, b := range p.Spec.SetOp.Branches {
		if j < 0 || b.Keys[j] == "NULL" {
			continue
		}
		for _, src := range b.sources() {
			for x, k := range src.KeyCols {
				if b.Keys[j] == ident.Quote(aliasOf(src))+"."+ident.Quote(k) {
					return src.KeyTypes[x]
				}
			}
		}
	}
	return "text"
}

// AffectedBranch finds the keys of a set operation that changes of the
// branch at pos touch: for UNION ALL the branch's keys of the changed
// rows (an aggregating branch's groups of them, reached along its join
// when it joins: decision 0056); otherwise the distinct rows their old
// values and current rows give in that branch. Returns the keys as text
// and their bucket; "" for a branch read in one scan with an earlier one
// (scanGroups), whose query finds the keys of both.
func (p *Plan) AffectedBranch(c Changes, pos, buckets int) string {
	i, local := p.Spec.SetOp.branchAt(pos)
	if p.Spec.SetOp.Over() {
		return p.affectedOver(c, i, local, buckets)
	}
	b := p.Spec.SetOp.Branches[i]
	a := aliasOf(b.Source)
	// The branch's key expressions, cast to the key's types once the
	// target has recorded them.
	exprs := make([]string, len(b.Keys))
	for j, e := range b.Keys {
		exprs[j] = e
		if t := p.Spec.Key[j].Type; t != "" {
			exprs[j] = "(" + e + ")::" + t
		}
	}
	if p.Spec.SetOp.All {
		// A row's unit is its branch and FROM key: the partition.
		exprs = exprs[:len(p.Spec.Window.Partition)]
	}
	if b.Joined() && (local > 0 || !p.Spec.SetOp.All || b.Aggregated) {
		// Along the branch's join tree from the changed table to the
		// unit's: its FROM table, or without ALL the table its outputs
		// read (the NULL-extended row too when a LEFT JOIN can leave that
		// table out), as for a join of many tables (decision 0026).
		bp := &Plan{Spec: b.spec()}
		// An aggregating branch's unit is its group, found through the
		// table its GROUP BY reads, as GROUP BY over a join does.
		grouped := !p.Spec.SetOp.All || b.Aggregated
		at := 0
		if grouped {
			at = b.Group
		}
		for j, e := range exprs {
			if e == "NULL" && p.Spec.Key[j].Type == "" {
				exprs[j] = "NULL::text"
			}
		}
		return bp.walkUnits(c, local, at, exprs, p.setOpKeyTypes(), grouped && bp.nullable(at), buckets)
	}
	if p.Spec.SetOp.All && !b.Aggregated && !p.Spec.SetOp.grouped() {
		// The changed keys, as the branch's table types them.
		var keys []string
		for i, k := range b.Source.KeyCols {
			keys = append(keys, fromKeyParam(fmt.Sprintf("chg.k%d", i+1), b.Source.KeyTypes[i])+" AS "+ident.Quote(k))
		}
		for j, e := range b.Keys {
			if e == "NULL" && p.Spec.Key[j].Type == "" {
				exprs[j] = "NULL::text"
			}
		}
		return fmt.Sprintf("WITH %s SELECT DISTINCT %s FROM (SELECT %s FROM chg) AS %s",
			c.cte(), textWithBucket(exprs, p.setOpKeyTypes(), buckets), strings.Join(keys, ", "), ident.Quote(a))
	}
	for j, e := range exprs {
		if e == "NULL" && p.Spec.Key[j].Type == "" {
			exprs[j] = "NULL::text" // another branch's key column
		}
	}
	where := ""
	if b.Where != "" {
		where = " AND (" + b.Where + ")"
	}
	// Branches read in one scan (scanGroups) find their units in one
	// query, at the group's first branch, and the others in none.
	switch group := p.Spec.SetOp.scanGroups(p.mergesScans())[i]; {
	case len(group) == 0:
		return ""
	case len(group) > 1:
		where = ""
		if w := p.Spec.SetOp.groupWhere(group); w != "" {
			where = " AND (" + w + ")"
		}
	}
	old := fmt.Sprintf("SELECT %s FROM %s WHERE true%s", strings.Join(exprs, ", "), c.oldImage(a), where)
	cur := fmt.Sprintf("SELECT %s FROM %s AS %s WHERE %s%s", strings.Join(exprs, ", "),
		ident.Qualified(b.Source.Schema, b.Source.Table), ident.Quote(a), c.currentByKey(a), where)
	cols := make([]string, len(exprs))
	for i := range cols {
		cols[i] = fmt.Sprintf("g%d", i+1)
	}
	return fmt.Sprintf("WITH %s SELECT DISTINCT %s FROM (%s) AS grp(%s)", c.cte(), textWithBucket(cols, p.setOpKeyTypes(), buckets),
		strings.Join(c.pick(old, cur), " UNION "), strings.Join(cols, ", "))
}

// PlannerSettings are the statements a keyed recompute of the plan runs
// before and after its own, in its transaction ("" for none). A set
// operation's keys are matched on several columns in CTEs PostgreSQL
// estimates at a few rows, so it would match them in nested loops, a cost
// quadratic in the keys of a page (575 ms for 1,000 keys, 24 ms hashed).
// A unit of several columns is probed unit by unit (multiUnit), in nested
// loops that are the plan's point: with them disabled, every plan cost
// over 10^10, and PostgreSQL compiled each page's statement with JIT
// (1.7 s a page of 51 units of 200-row tables).
func (p *Plan) PlannerSettings() (before, after string) {
	if p.Partial() {
		// A page reads a few ranges, but the generic plan prices the
		// key-by-key branch (the one group's key: every range) at the
		// whole source: JIT compiled it for 7 s a statement.
		return "SET LOCAL jit = off", "SET LOCAL jit TO DEFAULT"
	}
	if p.countedCopies() {
		// Each value is probed on its own (countedRecompute), but the
		// generic plan prices the copies generate_series makes at 1,000
		// a value and the source's values at 200 rows each: over
		// jit_above_cost at 1M rows (400 ms of compilation a page).
		return "SET LOCAL jit = off", "SET LOCAL jit TO DEFAULT"
	}
	if p.Spec.SetOp == nil || p.multiUnit() {
		return "", ""
	}
	// With nested loops off, a plan that still needs one (an aggregate
	// over a counted set operation repeats each value by a nested loop
	// over generate_series) costs over 10^10, above any jit_above_cost:
	// every page was compiled, 1.2 s of JIT for a 60 ms page of 200 groups
	// at 1M rows (decision 0060). A page reads its keys' rows, which JIT
	// never pays for, so it is off too.
	return "SET LOCAL enable_nestloop = off; SET LOCAL jit = off", "SET LOCAL enable_nestloop TO DEFAULT; SET LOCAL jit TO DEFAULT"
}

// setOpKeyTypes are the types of a set operation's key columns, as the
// target records them ("" before it does).
func (p *Plan) setOpKeyTypes() []string {
	types := make([]string, len(p.Spec.Key))
	for i, k := range p.Spec.Key {
		types[i] = k.Type
	}
	return types
}

// KeyRead is a table column that fills a key column in one branch.
type KeyRead struct {
	Key    string // the key column's name
	Source Source
	Column string
}

// SetOpKeyReads says, for a transform reading a set operation's target,
// which table column fills each key column in each branch (the branch
// column is a constant). It returns the name of the first key column that
// can be NULL in some row: one another branch fills (NULL in this one's
// rows), a table's a LEFT JOIN may leave out, or an expression that is
// not a plain column.
func (p *Plan) SetOpKeyReads() ([]KeyRead, string) {
	var out []KeyRead
	for _, b := range p.Spec.SetOp.Branches {
		bp := &Plan{Spec: b.spec()}
		srcs := b.sources()
		outer := srcs[:1+len(b.Joins)]
		keys := b.Keys
		if p.Spec.SetOp.Over() {
			keys = b.Units // an aggregate's groups, as each branch gives them
		}
		for j, e := range keys {
			name := p.Spec.Key[j].Name
			if p.Spec.SetOp.All && !p.Spec.SetOp.Over() && j == 0 {
				continue // the branch's number
			}
			m := keyColumn.FindStringSubmatch(e)
			if m == nil || e == "NULL" {
				return nil, name
			}
			pos := -1
			for i, s := range outer {
				if (m[1] == "" && len(outer) == 1) || m[1] == aliasOf(s) {
					pos = i
				}
			}
			if pos < 0 || bp.nullable(pos) {
				return nil, name
			}
			col := m[2]
			if !strings.Contains(e, `"`) {
				col = strings.ToLower(col) // an unquoted name folds to lower case
			}
			out = append(out, KeyRead{Key: name, Source: srcs[pos], Column: col})
		}
	}
	return out, ""
}

// keyColumn matches a plain column reference, optionally qualified:
// group 1 the qualifier, group 2 the column.
var keyColumn = regexp.MustCompile(`^(?:"?([A-Za-z_][A-Za-z0-9_$]*)"?\.)?"?([A-Za-z_][A-Za-z0-9_$]*)"?$`)
