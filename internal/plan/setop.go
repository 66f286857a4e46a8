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
	// Tree is how the branches combine (set operations without ALL).
	Tree     *grammar.SetNode `json:"tree,omitempty"`
	Branches []Branch         `json:"branches"`
}

// Branch is one SELECT of a set operation over one table.
type Branch struct {
	Source Source `json:"source"`
	Where  string `json:"where,omitempty"`
	// Keys and Cols are the branch's expressions for each of Spec.Key and
	// Spec.Columns ("NULL" for a key column of another branch).
	Keys []string `json:"keys"`
	Cols []string `json:"cols,omitempty"`
}

// setOpAlias names the derived table of a set operation's branches.
const setOpAlias = "trellis_u"

// BranchColumn is the column of a UNION ALL target that says which
// branch (1 for the first) a row comes from; setBranchMarker is its
// counterpart inside the derived table of a set operation without ALL.
const (
	BranchColumn    = "branch"
	setBranchMarker = "trellis_branch"
)

func setCol(name string) string { return ident.Quote(setOpAlias) + "." + ident.Quote(name) }

// CompileSetOp compiles a set operation: branches are its SELECTs (the
// first is the statement itself), resolved, and tables their tables, one
// each. It returns the columns of each branch's table whose old values
// capture must record.
func CompileSetOp(tree *grammar.SetNode, branches []*grammar.Transform, tables []*Table, withoutSourceIndex bool) (Spec, [][]string, error) {
	first := branches[0]
	spec := Spec{WithoutSourceIndex: withoutSourceIndex, SetOp: &SetOp{All: tree.All}}
	for i, b := range branches {
		if len(b.Select) != len(first.Select) {
			return spec, nil, errs.New(trellistype.CodeValidation, "branch %d of the set operation has %d columns and branch 1 has %d: each branch must select as many", i+1, len(b.Select), len(first.Select))
		}
		if tables[i].Alias == setOpAlias {
			return spec, nil, errs.New(trellistype.CodeValidation, "the alias %s is Trellis's own: give the table of branch %d another alias", setOpAlias, i+1)
		}
		t := tables[i]
		spec.SetOp.Branches = append(spec.SetOp.Branches, Branch{Where: b.Where,
			Source: Source{Schema: t.Schema, Table: t.Name, Alias: b.From.Alias, KeyCols: t.KeyCols, KeyTypes: t.KeyTypes}})
	}
	names := make([]string, len(first.Select))
	for j, it := range first.Select {
		names[j] = it.Name
	}
	br := spec.SetOp.Branches
	if tree.All {
		if slices.Contains(names, BranchColumn) {
			return spec, nil, errs.New(trellistype.CodeValidation, "the output name %s is taken: a UNION ALL target has a column %s saying which branch a row comes from; rename that output", BranchColumn, BranchColumn)
		}
		spec.Key = append(spec.Key, Column{Name: BranchColumn, Expr: setCol(BranchColumn)})
		for i := range br {
			br[i].Keys = append(br[i].Keys, fmt.Sprintf("%d::smallint", i+1))
		}
		// An output that is a key column of its table in every branch
		// serves as that key column.
		served := make([]map[string]bool, len(br))
		for i := range served {
			served[i] = map[string]bool{}
		}
		shared := map[int]bool{}
		for j := range first.Select {
			cols := make([]string, len(br))
			for i, b := range branches {
				it := b.Select[j]
				for _, k := range tables[i].KeyCols {
					if isColumn(it, tables[i], k, tables[i:i+1]) && !served[i][k] {
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
		// name and type share it.
		slot := map[string]int{}
		slotType := map[string]string{}
		for i := range br {
			t := tables[i]
			for c, k := range t.KeyCols {
				if served[i][k] {
					continue
				}
				name := t.Alias + "_" + k
				if slices.Contains(names, name) || name == BranchColumn {
					return spec, nil, errs.New(trellistype.CodeValidation, "column %s is taken: the target needs it for the key column %s of branch %d; select the key column in every branch, or rename that output", name, k, i+1)
				}
				if at, ok := slot[name]; ok {
					if slotType[name] != t.KeyTypes[c] {
						return spec, nil, errs.New(trellistype.CodeValidation, "the key columns %s of two branches have different types (%s, %s): give the tables different aliases", name, slotType[name], t.KeyTypes[c])
					}
					br[i].Keys[at] = ident.Quote(t.Alias) + "." + ident.Quote(k)
					continue
				}
				slot[name], slotType[name] = len(spec.Key), t.KeyTypes[c]
				spec.Key = append(spec.Key, Column{Name: name, Expr: setCol(name)})
				for x := range br {
					e := "NULL"
					if x == i {
						e = ident.Quote(t.Alias) + "." + ident.Quote(k)
					}
					br[x].Keys = append(br[x].Keys, e)
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
		for _, k := range spec.Key {
			part = append(part, k.Expr)
		}
		spec.Window = &Window{Partition: part}
	} else {
		// Each distinct row once: the row is the key.
		for j, n := range names {
			spec.Key = append(spec.Key, Column{Name: n, Expr: setCol(n)})
			spec.GroupBy = append(spec.GroupBy, setCol(n))
			for i, b := range branches {
				br[i].Keys = append(br[i].Keys, b.Select[j].Expr)
			}
		}
		spec.SetOp.Tree = tree
		spec.Having = presence(tree)
	}
	needs := make([][]string, len(branches))
	for i, b := range branches {
		var reads []string
		for _, it := range b.Select {
			for _, c := range it.Columns {
				reads = appendNew(reads, c.Column)
			}
		}
		for _, c := range b.WhereColumns {
			reads = appendNew(reads, c.Column)
		}
		for _, k := range tables[i].KeyCols {
			reads = appendNew(reads, k)
		}
		for _, r := range reads {
			if _, ok := tables[i].Columns[r]; !ok {
				return spec, nil, errs.New(trellistype.CodeValidation, "column %s does not exist in %s (branch %d of the set operation)", r, tables[i].Alias, i+1)
			}
		}
		br[i].Source.Reads = reads
		if !tree.All {
			// A row's old values give the distinct rows it was part of.
			needs[i] = reads
		}
		br[i].Source.Needs = needs[i]
	}
	spec.Source = br[0].Source
	spec.Reads = br[0].Source.Reads
	return spec, needs, nil
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

// setOpFrom is the derived table of a set operation's branches, each
// output cast to its column's type once the target has recorded it (so
// that PostgreSQL reads the branches as one appended relation); a paused
// column is NULL in every branch.
func (p *Plan) setOpFrom() string {
	so := p.Spec.SetOp
	marker := p.Spec.Having != ""
	parts := make([]string, len(so.Branches))
	for i, b := range so.Branches {
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
		for j, k := range p.Spec.Key {
			out(b.Keys[j], k)
		}
		for j, c := range p.Spec.Columns {
			out(b.Cols[j], c)
		}
		if marker {
			sel = append(sel, fmt.Sprintf("%d AS %s", i+1, ident.Quote(setBranchMarker)))
		}
		where := ""
		if b.Where != "" {
			where = " WHERE (" + b.Where + ")"
		}
		parts[i] = fmt.Sprintf("SELECT %s FROM %s AS %s%s", strings.Join(sel, ", "), ident.Qualified(b.Source.Schema, b.Source.Table), ident.Quote(aliasOf(b.Source)), where)
	}
	return "(" + strings.Join(parts, " UNION ALL ") + ") AS " + ident.Quote(setOpAlias)
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
		for x, k := range b.Source.KeyCols {
			if b.Keys[j] == ident.Quote(aliasOf(b.Source))+"."+ident.Quote(k) {
				return b.Source.KeyTypes[x]
			}
		}
	}
	return "text"
}

// AffectedBranch finds the keys of a set operation that changes of the
// branch at pos touch: for UNION ALL the branch's keys of the changed
// rows; otherwise the distinct rows their old values and current rows
// give in that branch. Returns the keys as text and their bucket.
func (p *Plan) AffectedBranch(c Changes, pos, buckets int) string {
	b := p.Spec.SetOp.Branches[pos]
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
	where := ""
	if b.Where != "" {
		where = " AND (" + b.Where + ")"
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
func (p *Plan) PlannerSettings() (before, after string) {
	if p.Spec.SetOp == nil {
		return "", ""
	}
	return "SET LOCAL enable_nestloop = off", "SET LOCAL enable_nestloop TO DEFAULT"
}

// currentByKey is Changes.current for a table of one key column: the
// changed keys as an array the planner cannot size, so it finds the rows
// through the key's index (sized, a page's keys made it hash the whole
// table, a cost growing with the table).
func (c Changes) currentByKey(alias string) string {
	src := c.Source
	if len(src.KeyCols) != 1 || isArrayType(src.KeyTypes[0]) {
		return c.current(alias)
	}
	o := opAt(src.KeyOps, 0)
	k1 := fromKeyParam("k1", src.KeyTypes[0])
	if o != nil {
		k1 = "k1::" + o.Type
	}
	return anyOf(ident.Quote(alias)+"."+ident.Quote(src.KeyCols[0]), "ARRAY(SELECT "+k1+" FROM chg)", o)
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
