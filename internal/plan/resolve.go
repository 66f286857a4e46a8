package plan

import (
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/trellistype"
)

// Resolve completes a parsed TRANSFORM with what only its tables' columns
// tell, before it is checked and compiled: `*` and `t.*` become the
// tables' columns (in table order; a USING column once, first, as
// PostgreSQL does), a comma-separated FROM takes its join equalities from
// WHERE, and SELECT DISTINCT without aggregates becomes a GROUP BY of every
// output that reads a column. It returns a new Transform; s is unchanged.
// tables are the FROM table then the joined ones, as for Compile.
func Resolve(s *grammar.Transform, tables []*Table) (*grammar.Transform, error) {
	tables = outerTables(s, tables)
	r := *s
	r.Select = nil
	for _, it := range s.Select {
		if !it.Star {
			r.Select = append(r.Select, it)
			continue
		}
		items, err := expandStar(s, it.StarOf, tables)
		if err != nil {
			return nil, err
		}
		r.Select = append(r.Select, items...)
	}
	seen := map[string]bool{}
	for _, it := range r.Select {
		if seen[it.Name] {
			return nil, errs.New(trellistype.CodeValidation, "duplicate output column name %s (every target column needs its own name): select the columns by name, with AS for one of them", it.Name)
		}
		seen[it.Name] = true
	}
	r.Joins = slices.Clone(s.Joins)
	for i, j := range r.Joins {
		if i > 0 && len(j.Using) > 0 {
			return nil, errs.New(trellistype.CodeValidation, "JOIN %s USING (...) after the second table is not supported: write JOIN %s ON with the columns qualified", j.Table.Table.Name, j.Table.Table.Name)
		}
		for _, c := range j.Using {
			for _, t := range []*Table{tables[0], tables[min(i+1, len(tables)-1)]} {
				if _, ok := t.Columns[c]; !ok {
					return nil, errs.New(trellistype.CodeValidation, "USING column %s is not a column of %s", c, t.Alias)
				}
			}
		}
	}
	// A comma-joined table takes as its ON the WHERE equalities between
	// it and one earlier table (the first it has one with); the rest of
	// WHERE stays.
	taken := map[int]bool{}
	comma := false
	for i, j := range r.Joins {
		pos := i + 1
		if !j.Comma || pos >= len(tables) {
			continue
		}
		comma = true
		other := -1
		for ci, c := range s.WhereConjuncts {
			eq := c.Equality
			if eq == nil || taken[ci] {
				continue
			}
			l, lerr := tableOf(eq.Left, tables)
			rt, rerr := tableOf(eq.Right, tables)
			if lerr != nil || rerr != nil {
				continue
			}
			q := -1
			switch {
			case l == pos && rt < pos:
				q = rt
			case rt == pos && l < pos:
				q = l
			}
			if q < 0 || (other >= 0 && q != other) {
				continue
			}
			other = q
			r.Joins[i].On = append(r.Joins[i].On, *eq)
			taken[ci] = true
		}
		if len(r.Joins[i].On) == 0 {
			if pos == 1 {
				return nil, errs.New(trellistype.CodeValidation, "FROM %s, %s needs an equality of a column of %s and a column of %s in WHERE (a cross join is not supported)",
					tables[0].Alias, tables[1].Alias, tables[0].Alias, tables[1].Alias)
			}
			return nil, errs.New(trellistype.CodeValidation, "FROM ..., %s needs an equality of a column of %s and a column of a table before it in WHERE (a cross join is not supported)",
				tables[pos].Alias, tables[pos].Alias)
		}
	}
	if comma {
		if err := checkJoinsAfterComma(r.Joins, tables); err != nil {
			return nil, err
		}
		var rest []string
		for ci, c := range s.WhereConjuncts {
			if !taken[ci] {
				rest = append(rest, "("+c.SQL+")")
			}
		}
		r.Where = strings.Join(rest, " AND ")
	}
	if r.Distinct && len(r.GroupBy) == 0 && r.Having == "" && !slices.ContainsFunc(r.Select, func(it grammar.SelectItem) bool { return it.HasAggregate }) {
		// Every output is the key: a constant one is not (PostgreSQL would
		// read a bare integer in GROUP BY as a position), and is the same
		// in every row anyway.
		r.GroupBy, r.GroupByColumns = nil, nil
		for _, it := range r.Select {
			if len(it.Columns) == 0 {
				continue
			}
			r.GroupBy = append(r.GroupBy, it.Expr)
			for _, c := range it.Columns {
				if !slices.Contains(r.GroupByColumns, c) {
					r.GroupByColumns = append(r.GroupByColumns, c)
				}
			}
		}
		if len(r.GroupBy) == 0 {
			return nil, errs.New(trellistype.CodeValidation, "SELECT DISTINCT needs an output that reads a column")
		}
	}
	return &r, nil
}

// expandStar lists the columns `*` (of every table) or `q.*` stands for.
func expandStar(s *grammar.Transform, q string, tables []*Table) ([]grammar.SelectItem, error) {
	col := func(t *Table, c string) grammar.SelectItem {
		return grammar.SelectItem{Expr: ident.Quote(t.Alias) + "." + ident.Quote(c), Name: c,
			Columns: []grammar.ColumnRef{{Qualifier: t.Alias, Column: c}}}
	}
	if q != "" {
		for _, t := range tables {
			if q == t.Alias || q == t.Name {
				var out []grammar.SelectItem
				for _, c := range t.Order {
					out = append(out, col(t, c))
				}
				return out, nil
			}
		}
		return nil, errs.New(trellistype.CodeValidation, "%s.* names no table of the transform", q)
	}
	var using []string
	for _, j := range s.Joins {
		using = append(using, j.Using...)
	}
	var out []grammar.SelectItem
	for _, c := range using {
		if len(s.Joins) > 0 && s.Joins[0].Kind == grammar.JoinFull && len(tables) > 1 {
			// A FULL JOIN's merged column: either table's, whichever the
			// row holds, as PostgreSQL defines it.
			a, b := col(tables[0], c), col(tables[1], c)
			out = append(out, grammar.SelectItem{Expr: "COALESCE(" + a.Expr + ", " + b.Expr + ")", Name: c,
				Columns: append(a.Columns, b.Columns...)})
			continue
		}
		out = append(out, col(tables[0], c))
	}
	order := make([]int, len(tables))
	for i := range order {
		order[i] = i
	}
	if s.Swapped && len(order) > 1 {
		// Written `a RIGHT JOIN b`: a's columns come first.
		order[0], order[1] = 1, 0
	}
	for _, i := range order {
		t := tables[i]
		for _, c := range t.Order {
			if i > 0 && slices.Contains(s.Joins[i-1].Using, c) || i == 0 && slices.Contains(using, c) {
				continue
			}
			out = append(out, col(t, c))
		}
	}
	return out, nil
}

// checkJoinsAfterComma applies PostgreSQL's reading of `FROM a, b JOIN c
// ON ...`: the JOIN joins b alone, so its ON may read only b and the
// tables joined after it, and a RIGHT or FULL JOIN there would keep rows
// without b that the WHERE equality joining b to a table before it drops
// again (the spec applies that equality as b's ON, before the outer join,
// and would keep them): it is refused.
func checkJoinsAfterComma(joins []grammar.Join, tables []*Table) error {
	last := -1 // the last comma-separated table, as an index of tables
	for i, j := range joins {
		if j.Comma {
			last = i + 1
		}
	}
	if last < 0 || last >= len(tables) {
		return nil
	}
	for i := last; i < len(joins); i++ {
		j := joins[i]
		if j.Kind == grammar.JoinRight || j.Kind == grammar.JoinFull {
			return errs.New(trellistype.CodeValidation, "%s JOIN %s after a comma-separated FROM is not supported (it joins %s alone, and the WHERE equality of %s with a table before it drops the rows it adds): write the comma join as JOIN %s ON",
				strings.ToUpper(string(j.Kind)), j.Table.Table.Name, tables[last].Alias, tables[last].Alias, tables[last].Alias)
		}
		for _, c := range j.On {
			for _, ref := range []grammar.ColumnRef{c.Left, c.Right} {
				if at, err := tableOf(ref, tables); err == nil && at < last {
					return errs.New(trellistype.CodeValidation, "the ON of JOIN %s reads %s, which is outside its join: after a comma a JOIN joins only the table before it (as in PostgreSQL); write FROM %s JOIN %s ON",
						j.Table.Table.Name, tables[at].Alias, tables[at].Alias, tables[last].Alias)
				}
			}
		}
	}
	return nil
}
