package plan

import (
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/trellistype"
)

// Table is one table of a definition as the catalog describes it: the
// facts compilation needs, read by the caller.
type Table struct {
	Schema string
	Name   string
	// Alias is the name the statement uses for the table: its alias, or
	// its name when it has none.
	Alias    string
	KeyCols  []string
	KeyTypes []string
	// KeyNulls says which key columns may be NULL (see Source.KeyNulls).
	KeyNulls []bool
	Columns  map[string]string // column name -> type
	// Order are the column names in the table's order (what `*` lists).
	Order []string
}

// Compile turns a parsed TRANSFORM over its resolved tables (the FROM
// table, the joined ones, then each semi- or anti-join's) into a spec, and
// returns the columns of each table whose old values capture must record.
// The caller sets the sources' IDs and the columns' types once the target
// exists.
func Compile(s *grammar.Transform, tables []*Table) (Spec, [][]string, error) {
	all := tables
	tables = outerTables(s, tables) // what the statement's own clauses read
	from := tables[0]
	spec := Spec{
		Source:             Source{Schema: from.Schema, Table: from.Name, Alias: s.From.Alias, KeyCols: from.KeyCols, KeyTypes: from.KeyTypes, KeyNulls: from.KeyNulls},
		Where:              s.Where,
		GroupBy:            s.GroupBy,
		Having:             s.Having,
		WithoutSourceIndex: s.WithoutSourceIndex,
	}
	needs := make([][]string, len(all))
	need := func(i int, col string) { needs[i] = appendNew(needs[i], col) }
	var reads []grammar.ColumnRef
	for _, it := range s.Select {
		reads = append(reads, it.Columns...)
	}
	reads = append(reads, s.WhereColumns...)
	reads = append(reads, s.GroupByColumns...)
	reads = append(reads, s.HavingColumns...)
	reads = append(reads, s.DistinctOnColumns...)
	reads = append(reads, orderColumns(s, tables)...)
	// tableReads are the columns each table's reads, by position.
	tableReads := make([][]string, len(all))
	for _, r := range reads {
		i, err := tableOf(r, tables)
		if err != nil {
			return spec, nil, err
		}
		tableReads[i] = appendNew(tableReads[i], r.Column)
	}
	spec.Reads = tableReads[0]
	for idx, j := range s.Joins {
		pos := idx + 1
		if pos >= len(tables) {
			break
		}
		if idx > 0 && len(j.Using) > 0 {
			return spec, nil, errs.New(trellistype.CodeValidation, "JOIN %s USING (...) after the second table is not supported: write JOIN %s ON with the columns qualified", tables[pos].Alias, tables[pos].Alias)
		}
		joined := tables[pos]
		join := Join{Left: j.Kind == grammar.JoinLeft || j.Kind == grammar.JoinFull, Full: j.Kind == grammar.JoinFull, Right: j.Kind == grammar.JoinRight, To: -1,
			Source: Source{Schema: joined.Schema, Table: joined.Name, Alias: j.Table.Alias, KeyCols: joined.KeyCols, KeyTypes: joined.KeyTypes, KeyNulls: joined.KeyNulls}}
		for _, c := range j.On {
			l, err := tableOf(c.Left, tables)
			if err != nil {
				return spec, nil, err
			}
			r, err := tableOf(c.Right, tables)
			if err != nil {
				return spec, nil, err
			}
			if pos == 1 && l == r {
				return spec, nil, errs.New(trellistype.CodeValidation, "each ON equality must compare a column of %s with a column of %s", from.Alias, joined.Alias)
			}
			fc, jc, other := c.Left.Column, c.Right.Column, l
			if l == pos {
				fc, jc, other = jc, fc, r
			} else if r != pos {
				other = -1
			}
			if other < 0 || other >= pos {
				return spec, nil, errs.New(trellistype.CodeValidation, "each ON equality of JOIN %s must compare a column of %s with a column of a table before it: move other conditions to WHERE", joined.Alias, joined.Alias)
			}
			if join.To >= 0 && join.To != other {
				return spec, nil, errs.New(trellistype.CodeValidation,
					"the ON clause of JOIN %s compares it with two tables (%s and %s): each joined table's ON must compare it with one earlier table; move the other equality to WHERE",
					joined.Alias, tables[join.To].Alias, tables[other].Alias)
			}
			join.To = other
			join.On = append(join.On, JoinOn{From: fc, Joined: jc})
			need(other, fc)
			need(pos, jc)
			tableReads[other] = appendNew(tableReads[other], fc)
			tableReads[pos] = appendNew(tableReads[pos], jc)
		}
		join.Source.Reads = tableReads[pos]
		if pos == 1 {
			spec.Join = &join
		} else {
			spec.Joins = append(spec.Joins, join)
		}
	}
	if err := compileSemis(&spec, s, all, tables, need, tableReads); err != nil {
		return spec, nil, err
	}
	spec.Global = len(s.GroupBy) == 0 && s.Aggregated()
	var err error
	switch {
	case spec.Global:
		for _, it := range s.Select {
			spec.Columns = append(spec.Columns, Column{Name: it.Name, Expr: it.Expr})
		}
	case len(s.Windows) > 0, len(s.DistinctOn) > 0, s.Limit > 0:
		err = compileWindow(&spec, s, tables, need)
	case len(s.GroupBy) > 0:
		err = compileGrouped(&spec, s, tables, need)
	case len(tables) >= 2:
		err = compileJoin(&spec, s, tables)
	default:
		err = compileProjection(&spec, s, tables)
		if err == nil && slices.Contains(from.KeyNulls, true) {
			keyedProjection(&spec)
		}
	}
	if err != nil {
		return spec, nil, err
	}
	spec.Source.Needs = needs[0]
	spec.Reads = tableReads[0]
	for i, j := range spec.JoinList() {
		j.Source.Needs = needs[i+1]
		j.Source.Reads = tableReads[i+1]
	}
	for i := range spec.Semis {
		pos := len(tables) + i
		spec.Semis[i].Source.Needs, spec.Semis[i].Source.Reads = needs[pos], tableReads[pos]
	}
	if err := recordColumnReads(&spec, s, tables); err != nil {
		return spec, nil, err
	}
	return spec, needs, nil
}

// outerTables are the tables a statement's clauses read: all but its
// semi- and anti-joins', which only their subqueries see.
func outerTables(s *grammar.Transform, tables []*Table) []*Table {
	return tables[:len(tables)-len(s.SubJoins)]
}

// compileSemis records the semi- and anti-joins of WHERE: each one's
// correlations compare its table with one outer table, its other
// conditions read its own columns; their SQL joins the WHERE clause, with
// the table qualified.
func compileSemis(spec *Spec, s *grammar.Transform, all, outer []*Table, need func(int, string), reads [][]string) error {
	if len(s.SubJoins) == 0 {
		return nil
	}
	if len(s.Windows) > 0 || len(s.DistinctOn) > 0 || s.Limit > 0 {
		return errs.New(trellistype.CodeValidation, "EXISTS and IN subqueries are not supported with window functions, DISTINCT ON or LIMIT: define the filtered rows as a transform and read its target")
	}
	var conds []string
	if s.Where != "" {
		conds = append(conds, "("+s.Where+")")
	}
	for k, sj := range s.SubJoins {
		pos := len(outer) + k
		u := all[pos]
		has := func(c grammar.ColumnRef) error {
			if _, ok := u.Columns[c.Column]; !ok {
				return errs.New(trellistype.CodeValidation, "column %s does not exist in %s, the subquery's table (qualify a column of the outer tables)", c.String(), u.Alias)
			}
			return nil
		}
		semi := Semi{Anti: sj.Anti, In: sj.In, To: -1, Where: sj.Where,
			Source: Source{Schema: u.Schema, Table: u.Name, Alias: sj.Table.Alias, KeyCols: u.KeyCols, KeyTypes: u.KeyTypes, KeyNulls: u.KeyNulls}}
		for _, c := range sj.On {
			if err := has(c.Left); err != nil {
				return err
			}
			o, err := tableOf(c.Right, outer)
			if err != nil {
				return err
			}
			if semi.To >= 0 && semi.To != o {
				return errs.New(trellistype.CodeValidation, "the correlations of the subquery over %s compare it with two tables (%s and %s): they must all compare it with one outer table",
					u.Alias, outer[semi.To].Alias, outer[o].Alias)
			}
			semi.To = o
			semi.On = append(semi.On, JoinOn{From: c.Right.Column, Joined: c.Left.Column})
			need(o, c.Right.Column)
			need(pos, c.Left.Column)
			reads[o] = appendNew(reads[o], c.Right.Column)
			reads[pos] = appendNew(reads[pos], c.Left.Column)
		}
		for _, c := range sj.WhereColumns {
			if err := has(c); err != nil {
				return err
			}
			reads[pos] = appendNew(reads[pos], c.Column)
		}
		spec.Semis = append(spec.Semis, semi)
		conds = append(conds, semi.SQL(outer[semi.To].Alias))
	}
	spec.Where = strings.Join(conds, " AND ")
	return nil
}

// compileGrouped sets the key and columns of a GROUP BY transform: the
// GROUP BY expressions, all reading one of the tables, are its key.
func compileGrouped(spec *Spec, s *grammar.Transform, tables []*Table, need func(int, string)) error {
	items := s.Select
	groupSide := -1
	for _, r := range s.GroupByColumns {
		i, err := tableOf(r, tables)
		if err != nil {
			return err
		}
		if groupSide >= 0 && i != groupSide {
			if s.Distinct {
				return errs.New(trellistype.CodeValidation, "SELECT DISTINCT over a JOIN must select columns of one of its tables (DISTINCT is a GROUP BY of its outputs, and the GROUP BY expressions of a JOIN must all read one table)")
			}
			return errs.New(trellistype.CodeValidation, "the GROUP BY expressions of a JOIN must all read columns of one of its tables (%s and %s here): define the join as a transform (it may select both columns) and group its target", tables[groupSide].Alias, tables[i].Alias)
		}
		groupSide = i
		need(i, r.Column)
	}
	if groupSide < 0 {
		return errs.New(trellistype.CodeValidation, "GROUP BY needs at least one column")
	}
	spec.GroupJoined = groupSide == 1
	if groupSide >= 2 {
		spec.GroupTable = groupSide
	}
	for _, g := range s.GroupBy {
		idx := slices.IndexFunc(items, func(it grammar.SelectItem) bool { return it.Expr == g })
		if idx < 0 {
			return errs.New(trellistype.CodeValidation, "GROUP BY expression %s must also be selected, with a name: it is the target's key", g)
		}
		spec.Key = append(spec.Key, Column{Name: items[idx].Name, Expr: g})
	}
	for _, it := range items {
		if !slices.ContainsFunc(spec.Key, func(k Column) bool { return k.Name == it.Name }) {
			spec.Columns = append(spec.Columns, Column{Name: it.Name, Expr: it.Expr})
		}
	}
	return nil
}

// compileWindow sets the key and columns of a transform with window
// functions, top-k (ORDER BY ... LIMIT) or DISTINCT ON: keyed by its
// partition's outputs (PARTITION BY, DISTINCT ON) then, unless a partition
// keeps one row (DISTINCT ON), the key of its rows (the source's, or over
// a join what tells the join's rows apart, see rowKeys); recomputed a
// partition at a time. Over a join, the partition reads one of its tables
// (as a GROUP BY over a join does), whose position is recorded as the
// GROUP BY's (GroupJoined, GroupTable).
func compileWindow(spec *Spec, s *grammar.Transform, tables []*Table, need func(int, string)) error {
	from := tables[0]
	keys := rowKeys(spec, tables)
	var partition []string
	var partCols []grammar.ColumnRef
	what := "PARTITION BY"
	switch {
	case len(s.Windows) > 0:
		partition, partCols = s.Windows[0].Partition, s.Windows[0].PartitionColumns
		spec.Window = &Window{Partition: partition}
		if s.RankOutput != "" {
			// Top-k per partition: the rank's output is one of the
			// columns, and the rows kept are those it ranks within Limit.
			idx := slices.IndexFunc(s.Select, func(it grammar.SelectItem) bool { return it.Name == s.RankOutput })
			if idx < 0 {
				return errs.New(trellistype.CodeValidation, "the top-k's rank column %s is not selected", s.RankOutput)
			}
			spec.Window.Rank, spec.Window.Limit = s.Select[idx].Expr, s.Limit
		}
		if err := windowsDeterministic(s, keys, tables); err != nil {
			return err
		}
	case len(s.DistinctOn) > 0:
		what = "DISTINCT ON"
		partition, partCols = s.DistinctOn, s.DistinctOnColumns
		if len(partCols) == 0 {
			return errs.New(trellistype.CodeValidation, "DISTINCT ON needs an expression that reads a column")
		}
		order, err := orderItems(s, tables, keys, append(slices.Clone(s.OrderByPlain), s.DistinctOnPlain...), "DISTINCT ON ... ORDER BY")
		if err != nil {
			return err
		}
		spec.Window = &Window{Partition: partition, Limit: 1,
			Rank: "row_number() OVER (PARTITION BY " + strings.Join(partition, ", ") + " ORDER BY " + order + ")"}
	default:
		order, err := orderItems(s, tables, keys, s.OrderByPlain, "ORDER BY ... LIMIT")
		if err != nil {
			return err
		}
		spec.Window = &Window{Limit: s.Limit, Rank: "row_number() OVER (ORDER BY " + order + ")"}
	}
	partPos := -1
	for _, c := range partCols {
		i, err := tableOf(c, tables)
		if err != nil {
			return err
		}
		if partPos >= 0 && i != partPos {
			return errs.New(trellistype.CodeValidation,
				"the %s expressions of a window over a JOIN must all read columns of one of its tables (%s and %s here): a change finds the partitions it touches through the join's columns, as for a GROUP BY over a join",
				what, tables[partPos].Alias, tables[i].Alias)
		}
		partPos = i
		need(i, c.Column)
	}
	spec.GroupJoined = partPos == 1
	if partPos >= 2 {
		spec.GroupTable = partPos
	}
	used := map[int]bool{}
	for _, p := range partition {
		idx := slices.IndexFunc(s.Select, func(it grammar.SelectItem) bool { return it.Expr == p })
		if idx < 0 {
			return errs.New(trellistype.CodeValidation, "%s expression %s must also be selected, with a name: a change recomputes the rows of its partitions, found by it in the target", what, p)
		}
		used[idx] = true
		spec.Key = append(spec.Key, Column{Name: s.Select[idx].Name, Expr: p})
	}
	if len(s.DistinctOn) > 0 {
		// One row per DISTINCT ON value: that is the key.
		for i, it := range s.Select {
			if !used[i] {
				spec.Columns = append(spec.Columns, Column{Name: it.Name, Expr: it.Expr})
			}
		}
		return nil
	}
	return keyAndColumns(spec, s, from, tables, keys, used)
}

// keyRef is one key column of a table of a definition, by position.
type keyRef struct {
	pos int
	col string
}

// rowKeys are the key columns that tell apart the rows a window's FROM
// clause yields: the FROM table's key; over a join, also the key of each
// joined table whose ON does not compare its whole key (one that does
// matches at most one row of the table before it, so the rows before it
// decide it). Under a FULL JOIN or a RIGHT JOIN after the second table a
// row may lack the tables before it: every table's key is needed.
func rowKeys(spec *Spec, tables []*Table) []keyRef {
	var out []keyRef
	for _, k := range tables[0].KeyCols {
		out = append(out, keyRef{0, k})
	}
	joins := spec.JoinList()
	outer := slices.ContainsFunc(joins, func(j *Join) bool { return j.Full || j.Right })
	for i, j := range joins {
		covered := !outer
		for _, k := range j.Source.KeyCols {
			if !slices.ContainsFunc(j.On, func(on JoinOn) bool { return on.Joined == k }) {
				covered = false
			}
		}
		if covered {
			continue
		}
		for _, k := range tables[i+1].KeyCols {
			out = append(out, keyRef{i + 1, k})
		}
	}
	return out
}

// keysText is keys as a tie-breaker to add to ORDER BY: the FROM table's
// key columns as they are named, or over a join qualified by the tables'
// aliases.
func keysText(keys []keyRef, tables []*Table) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.col
		if len(tables) > 1 {
			out[i] = tables[k.pos].Alias + "." + k.col
		}
	}
	return strings.Join(out, ", ")
}

// ordersBy reports whether the plain columns of an ORDER BY include every
// column of keys (a total order of the rows).
func ordersBy(plain []*grammar.ColumnRef, keys []keyRef, tables []*Table) bool {
	for _, k := range keys {
		if !slices.ContainsFunc(plain, func(c *grammar.ColumnRef) bool {
			if c == nil || c.Column != k.col {
				return false
			}
			i, err := tableOf(*c, tables)
			return err == nil && i == k.pos
		}) {
			return false
		}
	}
	return true
}

// orderItems checks that ORDER BY is a total order, so that the rows it
// keeps are the ones a fresh recompute keeps: the plain columns among
// it (and DISTINCT ON's) include the rows' key (keys). It returns ORDER BY as
// SQL, an item naming an output (not a column) replaced by the output's
// expression, as PostgreSQL reads it.
func orderItems(s *grammar.Transform, tables []*Table, keys []keyRef, plain []*grammar.ColumnRef, what string) (string, error) {
	from := tables[0]
	plain = slices.Clone(plain)
	items := slices.Clone(s.OrderBy)
	for i, c := range s.OrderByPlain {
		if c == nil || c.Qualifier != "" {
			continue
		}
		if slices.ContainsFunc(tables, func(t *Table) bool { _, ok := t.Columns[c.Column]; return ok }) {
			continue
		}
		if idx := slices.IndexFunc(s.Select, func(it grammar.SelectItem) bool { return it.Name == c.Column }); idx >= 0 {
			e := s.Select[idx].Expr
			if slices.ContainsFunc(s.Windows, func(w grammar.WindowCall) bool { return w.Output == c.Column }) || s.Select[idx].HasAggregate {
				return "", errs.New(trellistype.CodeValidation, "ORDER BY %s names an output with an aggregate or window function: order by columns", c.Column)
			}
			rest, _ := strings.CutPrefix(items[i], ident.Quote(c.Column))
			if rest == items[i] {
				rest, _ = strings.CutPrefix(items[i], c.Column)
			}
			items[i] = "(" + e + ")" + rest
			plain[i] = nil // an expression, unless it is exactly a column
			if it := s.Select[idx]; len(it.Columns) == 1 {
				if t, err := tableOf(it.Columns[0], tables); err == nil && isColumn(it, tables[t], it.Columns[0].Column, tables) {
					plain[i] = &it.Columns[0]
				}
			}
			continue
		}
		return "", errs.New(trellistype.CodeValidation, "ORDER BY %s is neither a column of %s nor an output", c.Column, from.Alias)
	}
	for _, r := range s.OrderByColumns {
		if _, err := tableOf(r, tables); err != nil && !slices.ContainsFunc(s.Select, func(it grammar.SelectItem) bool { return it.Name == r.Column }) {
			return "", err
		}
	}
	if !ordersBy(plain, keys, tables) {
		return "", errs.New(trellistype.CodeValidation,
			"%s leaves rows that tie on ORDER BY in an arbitrary order, so the target could differ from a fresh recompute: add the key as a tie-breaker (ORDER BY ..., %s)",
			what, keysText(keys, tables))
	}
	return strings.Join(items, ", "), nil
}

// orderColumns are the table columns ORDER BY reads (an output's name it
// uses reads the output's columns, which Select lists).
func orderColumns(s *grammar.Transform, tables []*Table) []grammar.ColumnRef {
	var out []grammar.ColumnRef
	for _, r := range s.OrderByColumns {
		if _, err := tableOf(r, tables); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// keyAndColumns appends the rows' key (keys, see rowKeys) to a window
// transform's key (a selected key column serves as it, else a column is
// added: of the key's name for one table, <alias>_<column> over a join)
// and sets the other outputs as its columns.
func keyAndColumns(spec *Spec, s *grammar.Transform, from *Table, tables []*Table, keys []keyRef, used map[int]bool) error {
	for _, kr := range keys {
		t, k := tables[kr.pos], kr.col
		name := k
		if len(tables) > 1 {
			name = t.Alias + "_" + k
		}
		idx := slices.IndexFunc(s.Select, func(it grammar.SelectItem) bool { return isColumn(it, t, k, tables) })
		switch {
		case idx >= 0 && used[idx]:
			continue // a PARTITION BY output that is the key column: it is in the key already
		case idx >= 0:
			used[idx] = true
			name = s.Select[idx].Name
		case slices.ContainsFunc(s.Select, func(it grammar.SelectItem) bool { return it.Name == name }):
			what := k
			if len(tables) > 1 {
				what = t.Alias + "." + k
			}
			return errs.New(trellistype.CodeValidation, "column %s is taken: the target needs it for the key column %s; select the key column as it is instead", name, what)
		}
		spec.Key = append(spec.Key, Column{Name: name, Expr: ident.Quote(t.Alias) + "." + ident.Quote(k)})
	}
	for i, it := range s.Select {
		if !used[i] {
			spec.Columns = append(spec.Columns, Column{Name: it.Name, Expr: it.Expr})
		}
	}
	return nil
}

// orderInsensitive are the window functions whose result does not depend
// on the order of rows that tie on the window's ORDER BY (peers): the
// ranks, and aggregates of no order over a frame of peers.
var orderInsensitive = map[string]bool{
	"rank": true, "dense_rank": true, "percent_rank": true, "cume_dist": true,
	"count": true, "sum": true, "avg": true, "min": true, "max": true,
	"bool_and": true, "bool_or": true, "every": true, "bit_and": true, "bit_or": true, "bit_xor": true,
}

// windowsDeterministic refuses a window function whose result could
// differ from a fresh recompute's: one that depends on the order of rows
// its ORDER BY leaves tied, unless the ORDER BY includes the rows' key
// (keys, see rowKeys: a total order).
func windowsDeterministic(s *grammar.Transform, keys []keyRef, tables []*Table) error {
	for _, w := range s.Windows {
		if orderInsensitive[w.Func] && !w.Rows {
			continue
		}
		if !ordersBy(w.OrderColumns, keys, tables) {
			return errs.New(trellistype.CodeValidation,
				"%s(...) OVER (...) in column %s depends on the order of rows that tie on its ORDER BY, so the target could differ from a fresh recompute: add the key as a tie-breaker (ORDER BY ..., %s)",
				w.Func, w.Output, keysText(keys, tables))
		}
	}
	return nil
}

// compileJoin sets the key and columns of a JOIN transform: the target's
// key is both tables' keys; a selected column that is a key column serves
// as it, else a column <alias>_<column> is added.
func compileJoin(spec *Spec, s *grammar.Transform, tables []*Table) error {
	items := s.Select
	used := map[int]bool{}
	for _, t := range tables {
		for _, k := range t.KeyCols {
			name := t.Alias + "_" + k
			idx := slices.IndexFunc(items, func(it grammar.SelectItem) bool { return isColumn(it, t, k, tables) })
			if idx >= 0 && !used[idx] {
				used[idx] = true
				name = items[idx].Name
			} else if slices.ContainsFunc(items, func(it grammar.SelectItem) bool { return it.Name == name }) {
				return errs.New(trellistype.CodeValidation, "column %s is taken: the target needs it for the key column %s.%s; select the key column as it is instead", name, t.Alias, k)
			}
			spec.Key = append(spec.Key, Column{Name: name, Expr: ident.Quote(t.Alias) + "." + ident.Quote(k)})
		}
	}
	for i, it := range items {
		if !used[i] {
			spec.Columns = append(spec.Columns, Column{Name: it.Name, Expr: it.Expr})
		}
	}
	return nil
}

// compileProjection sets the columns of a projection, whose key is its
// source's.
func compileProjection(spec *Spec, s *grammar.Transform, tables []*Table) error {
	from := tables[0]
	for _, it := range s.Select {
		if slices.Contains(from.KeyCols, it.Name) {
			if isColumn(it, from, it.Name, tables) {
				continue // the key column itself: the target has it already
			}
			return errs.New(trellistype.CodeValidation, "column %s is the target's key (a key column of its source: a primary key, or the key of the transform it reads): give the expression another name", it.Name)
		}
		spec.Columns = append(spec.Columns, Column{Name: it.Name, Expr: it.Expr})
	}
	return nil
}

// keyedProjection makes a projection of a source whose key may be NULL a
// join of one table (decision 0054): its key is the source's, named as
// the source's key columns, as a projection's.
func keyedProjection(spec *Spec) {
	a := spec.Source.Alias
	if a == "" {
		a = spec.Source.Table
	}
	for _, k := range spec.Source.KeyCols {
		spec.Key = append(spec.Key, Column{Name: k, Expr: ident.Quote(a) + "." + ident.Quote(k)})
	}
}

// tableOf says which table a column reference belongs to: 0 the FROM
// table, 1 the joined one.
func tableOf(ref grammar.ColumnRef, tables []*Table) (int, error) {
	var found []int
	for i, t := range tables {
		if ref.Qualifier != "" && ref.Qualifier != t.Alias && ref.Qualifier != t.Name {
			continue
		}
		if _, ok := t.Columns[ref.Column]; ok {
			found = append(found, i)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return 0, errs.New(trellistype.CodeValidation, "column %s does not exist in the transform's tables", ref.String())
	}
	return 0, errs.New(trellistype.CodeValidation, "column reference %s is ambiguous: qualify it with a table alias", ref.String())
}

// isColumn reports whether a select item is exactly the given column of a
// table.
func isColumn(it grammar.SelectItem, t *Table, col string, tables []*Table) bool {
	if len(it.Columns) != 1 || it.Columns[0].Column != col {
		return false
	}
	if i, err := tableOf(it.Columns[0], tables); err != nil || tables[i] != t {
		return false
	}
	e := strings.ReplaceAll(it.Expr, `"`, "")
	return e == col || e == t.Alias+"."+col || e == t.Name+"."+col
}

// recordColumnReads records which source columns each non-key column
// reads, and which the rest of the definition does, so that ALTER
// TRANSFORM can keep Reads exact.
func recordColumnReads(spec *Spec, s *grammar.Transform, tables []*Table) error {
	for i, c := range spec.Columns {
		idx := slices.IndexFunc(s.Select, func(it grammar.SelectItem) bool { return it.Name == c.Name })
		if idx < 0 {
			continue
		}
		by, err := readsAt(s.Select[idx].Columns, tables)
		if err != nil {
			return err
		}
		spec.Columns[i].Reads, spec.Columns[i].JoinedReads, spec.Columns[i].MoreReads = by[0], at(by, 1), more(by)
	}
	base := append(append(append([]grammar.ColumnRef(nil), s.WhereColumns...), s.GroupByColumns...), s.HavingColumns...)
	base = append(append(base, s.DistinctOnColumns...), orderColumns(s, tables)...)
	for _, k := range spec.Key {
		if idx := slices.IndexFunc(s.Select, func(it grammar.SelectItem) bool { return it.Name == k.Name }); idx >= 0 {
			base = append(base, s.Select[idx].Columns...)
		}
	}
	by, err := readsAt(base, tables)
	if err != nil {
		return err
	}
	for _, k := range spec.Source.KeyCols {
		by[0] = appendNew(by[0], k)
	}
	for i, j := range spec.JoinList() {
		for _, on := range j.On {
			by[j.To] = appendNew(by[j.To], on.From)
			by[i+1] = appendNew(by[i+1], on.Joined)
		}
	}
	for i, j := range spec.JoinList() {
		for _, k := range j.Source.KeyCols {
			by[i+1] = appendNew(by[i+1], k)
		}
		j.BaseReads = by[i+1]
	}
	spec.BaseReads = by[0]
	spec.PerColumnReads = true
	return nil
}

// ColumnReads splits column references into the FROM table's columns and
// the joined tables' (the second table's and later ones').
func ColumnReads(refs []grammar.ColumnRef, tables []*Table) (from, joined []string, err error) {
	by, err := readsAt(refs, tables)
	if err != nil {
		return nil, nil, err
	}
	for _, cols := range by[1:] {
		for _, c := range cols {
			joined = appendNew(joined, c)
		}
	}
	return by[0], joined, nil
}

// readsAt splits column references by the position of their table.
func readsAt(refs []grammar.ColumnRef, tables []*Table) ([][]string, error) {
	by := make([][]string, len(tables))
	for _, r := range refs {
		i, err := tableOf(r, tables)
		if err != nil {
			return nil, err
		}
		by[i] = appendNew(by[i], r.Column)
	}
	return by, nil
}

// at is by[i], or nil past its end.
func at(by [][]string, i int) []string {
	if i < len(by) {
		return by[i]
	}
	return nil
}

// more are the reads of the third and later tables (Column.MoreReads),
// nil for fewer tables.
func more(by [][]string) [][]string {
	if len(by) <= 2 {
		return nil
	}
	return by[2:]
}

// AddColumn returns the spec with a column added by ALTER TRANSFORM: its
// reads assigned to the tables they name, and the definition's Reads
// widened.
func AddColumn(spec Spec, item grammar.SelectItem, tables []*Table) (Spec, error) {
	tables = tables[:len(tables)-len(spec.Semis)] // a column cannot read a subquery's table
	by, err := readsAt(item.Columns, tables)
	if err != nil {
		return spec, err
	}
	from, joined := by[0], at(by, 1)
	spec.Columns = append(slices.Clone(spec.Columns), Column{Name: item.Name, Expr: item.Expr, Reads: from, JoinedReads: joined, MoreReads: more(by)})
	if spec.Join != nil {
		j := *spec.Join
		spec.Join = &j
	}
	spec.Joins = slices.Clone(spec.Joins)
	if spec.PerColumnReads {
		spec.SetReads()
		return spec, nil
	}
	spec.Reads = slices.Clone(spec.Reads)
	for _, r := range from {
		spec.Reads = appendNew(spec.Reads, r)
	}
	if spec.Join != nil {
		spec.Join.Source.Reads = slices.Clone(spec.Join.Source.Reads)
		for _, r := range joined {
			spec.Join.Source.Reads = appendNew(spec.Join.Source.Reads, r)
		}
	}
	return spec, nil
}

// DropColumn returns the spec without a column (ALTER TRANSFORM ... DROP
// COLUMN), its Reads narrowed to what the other columns still read.
func DropColumn(spec Spec, name string) Spec {
	spec.Columns = slices.DeleteFunc(slices.Clone(spec.Columns), func(c Column) bool { return c.Name == name })
	if spec.Join != nil {
		j := *spec.Join
		spec.Join = &j
	}
	spec.Joins = slices.Clone(spec.Joins)
	spec.SetReads()
	return spec
}

func appendNew(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}
