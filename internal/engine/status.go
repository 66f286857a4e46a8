package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

var plainColumn = regexp.MustCompile(`^(?:"?[A-Za-z_][A-Za-z0-9_$]*"?\.)?"?([A-Za-z_][A-Za-z0-9_$ ]*)"?$`)

// neededIndex is an index a definition's maintenance relies on: the gap
// to report, and the table's alias and the expressions (as the definition
// writes them) to index.
type neededIndex struct {
	gap   trellistype.SourceIndexGap
	alias string
	exprs []string
	// order, for a global top-k's ORDER BY, is each expression's
	// direction: the index must lead with exprs in this order, each
	// column in it or every column reversed.
	order []orderDir
}

// orderDir is the direction of an ORDER BY item.
type orderDir struct{ desc, nullsFirst bool }

// topKOrder is the ORDER BY of a global top-k over one table (a window
// ranking the whole source by row_number() in that order): its items'
// expressions as written, with their directions; nil for any other spec.
func topKOrder(spec plan.Spec) ([]string, []orderDir, []string) {
	const prefix = "row_number() OVER (ORDER BY "
	w := spec.Window
	if w == nil || len(w.Partition) > 0 || spec.SetOp != nil || spec.Join != nil || len(spec.Semis) > 0 {
		return nil, nil, nil
	}
	rank := strings.TrimPrefix(w.Rank, "pg_catalog.")
	if !strings.HasPrefix(rank, prefix) || !strings.HasSuffix(rank, ")") {
		return nil, nil, nil
	}
	var exprs, written []string
	var dirs []orderDir
	for _, item := range splitTopLevel(strings.TrimSuffix(strings.TrimPrefix(rank, prefix), ")")) {
		item = strings.TrimSpace(item)
		up := strings.ToUpper(item)
		var d orderDir
		nulls := ""
		switch {
		case strings.HasSuffix(up, " NULLS FIRST"):
			nulls, item = " NULLS FIRST", item[:len(item)-len(" NULLS FIRST")]
		case strings.HasSuffix(up, " NULLS LAST"):
			nulls, item = " NULLS LAST", item[:len(item)-len(" NULLS LAST")]
		}
		up = strings.ToUpper(item)
		dir := ""
		switch {
		case strings.HasSuffix(up, " DESC"):
			d.desc, dir, item = true, " DESC", item[:len(item)-len(" DESC")]
		case strings.HasSuffix(up, " ASC"):
			item = item[:len(item)-len(" ASC")]
		}
		// PostgreSQL's default: NULLS FIRST for DESC, LAST for ASC.
		d.nullsFirst = nulls == " NULLS FIRST" || (d.desc && nulls == "")
		item = strings.TrimSpace(item)
		exprs = append(exprs, item)
		dirs = append(dirs, d)
		written = append(written, exprColumns([]string{item})[0]+dir+nulls)
	}
	return exprs, dirs, written
}

// splitTopLevel splits s at the commas outside parentheses and quotes.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	var quote rune
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// neededIndexes lists the indexes a definition's maintenance relies on.
func neededIndexes(spec plan.Spec) []neededIndex {
	if spec.Global {
		// A global aggregate recomputes its one row from every row: no
		// index finds anything for it.
		return nil
	}
	if spec.SetOp != nil {
		return setOpIndexes(spec)
	}
	var needs []neededIndex
	alias := func(s plan.Source) string { return cmp.Or(s.Alias, s.Table) }
	quoted := func(cols []string) []string {
		out := make([]string, len(cols))
		for i, c := range cols {
			out[i] = ident.Quote(c)
		}
		return out
	}
	if len(spec.GroupBy) > 0 {
		groupSide := spec.Sources()[spec.GroupPos()]
		needs = append(needs, neededIndex{alias: alias(groupSide), exprs: spec.GroupBy})
	}
	if w := spec.Window; w != nil && len(w.Partition) > 0 {
		// The table the PARTITION BY reads (over a join, recorded as the
		// GROUP BY's).
		needs = append(needs, neededIndex{alias: alias(spec.Sources()[spec.GroupPos()]), exprs: w.Partition})
	}
	if exprs, dirs, _ := topKOrder(spec); exprs != nil {
		needs = append(needs, neededIndex{alias: alias(spec.Source), exprs: exprs, order: dirs})
	}
	sources := spec.Sources()
	for _, j := range spec.JoinList() {
		var from, joined []string
		for _, on := range j.On {
			from = append(from, on.From)
			joined = append(joined, on.Joined)
		}
		needs = append(needs, neededIndex{alias: alias(sources[j.To]), exprs: quoted(from)},
			neededIndex{alias: alias(j.Source), exprs: quoted(joined)})
	}
	for _, sj := range spec.Semis {
		var from, joined []string
		for _, on := range sj.On {
			from = append(from, on.From)
			joined = append(joined, on.Joined)
		}
		needs = append(needs, neededIndex{alias: alias(sources[sj.To]), exprs: quoted(from)},
			neededIndex{alias: alias(sj.Source), exprs: quoted(joined)})
	}
	for i, g := range gapsOf(spec) {
		needs[i].gap = g
	}
	return needs
}

// gapsOf lists the gaps a definition can have, with their columns and a
// fix written from the definition's text (IndexGaps replaces it with the
// one PostgreSQL accepts).
func gapsOf(spec plan.Spec) []trellistype.SourceIndexGap {
	var out []trellistype.SourceIndexGap
	table := func(s plan.Source) string { return s.Schema + "." + s.Table }
	if spec.SetOp != nil {
		for _, n := range setOpIndexes(spec) {
			out = append(out, n.gap)
		}
		return out
	}
	if len(spec.GroupBy) > 0 {
		groupSide := spec.Sources()[spec.GroupPos()] // the table the GROUP BY reads
		out = append(out, trellistype.SourceIndexGap{Table: table(groupSide), Columns: exprColumns(spec.GroupBy), Role: trellistype.RoleGroupBy})
	}
	if w := spec.Window; w != nil && len(w.Partition) > 0 {
		out = append(out, trellistype.SourceIndexGap{Table: table(spec.Sources()[spec.GroupPos()]), Columns: exprColumns(w.Partition), Role: trellistype.RolePartitionBy})
	}
	if _, _, written := topKOrder(spec); written != nil {
		out = append(out, trellistype.SourceIndexGap{Table: table(spec.Source), Columns: written, Role: trellistype.RoleOrderBy})
	}
	sources := spec.Sources()
	for _, j := range spec.JoinList() {
		var from, joined []string
		for _, on := range j.On {
			from = append(from, on.From)
			joined = append(joined, on.Joined)
		}
		out = append(out,
			trellistype.SourceIndexGap{Table: table(sources[j.To]), Columns: from, Role: trellistype.RoleJoinFrom},
			trellistype.SourceIndexGap{Table: table(j.Source), Columns: joined, Role: trellistype.RoleJoinJoined})
	}
	for _, sj := range spec.Semis {
		// A subquery's table is looked up by its correlated columns (the
		// recompute's EXISTS), the outer table by its own (affected keys).
		var from, joined []string
		for _, on := range sj.On {
			from = append(from, on.From)
			joined = append(joined, on.Joined)
		}
		out = append(out,
			trellistype.SourceIndexGap{Table: table(sources[sj.To]), Columns: from, Role: trellistype.RoleJoinFrom},
			trellistype.SourceIndexGap{Table: table(sj.Source), Columns: joined, Role: trellistype.RoleJoinJoined})
	}
	for i := range out {
		out[i].OptedOut = spec.WithoutSourceIndex
		schema, name, _ := strings.Cut(out[i].Table, ".")
		out[i].Fix = indexFixText(schema, name, out[i].Columns)
		if out[i].Role == trellistype.RoleOrderBy {
			out[i].Fix = orderFixText(schema, name, spec)
		}
	}
	return out
}

// indexFixText writes the CREATE INDEX of columns (exprColumns) of a
// table: a plain column quoted, anything else in parentheses.
func indexFixText(schema, name string, cols []string) string {
	var parts []string
	for _, c := range cols {
		if plainColumn.MatchString(c) && !strings.ContainsAny(c, "( ") {
			parts = append(parts, ident.Quote(c))
		} else {
			parts = append(parts, "("+c+")")
		}
	}
	return fmt.Sprintf("CREATE INDEX ON %s (%s);", ident.Qualified(schema, name), strings.Join(parts, ", "))
}

// exprColumns names the index columns for expressions: a plain column
// by its name, anything else as written.
func exprColumns(exprs []string) []string {
	var cols []string
	for _, g := range exprs {
		if m := plainColumn.FindStringSubmatch(g); m != nil {
			cols = append(cols, m[1])
		} else {
			cols = append(cols, g)
		}
	}
	return cols
}

func normalizeExpr(s string) string {
	s = strings.ToLower(s)
	return strings.NewReplacer(" ", "", "(", "", ")", "", `"`, "", "::timestampwithtimezone", "", "::text", "").Replace(s)
}

// indexLeads reads the leading n expressions of every valid index of
// table. PostgreSQL can fail the read with "cache lookup failed" when an
// index is dropped between two of its catalog lookups (another session
// dropping it as the read runs): the read is then tried again, in a
// savepoint when q is a transaction, so the transaction goes on.
func indexLeads(ctx context.Context, q catalog.Querier, table string, n int) ([][]string, error) {
	read := func(q catalog.Querier) ([][]string, error) {
		rows, err := q.Query(ctx, sqlIndexLeads, table, n)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[[]string])
	}
	for attempt := 1; ; attempt++ {
		tx, ok := q.(pgx.Tx)
		if !ok {
			leads, err := read(q)
			if err == nil || attempt == 3 || !indexVanished(err) {
				return leads, err
			}
			continue
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, err
		}
		leads, err := read(sp)
		if err == nil {
			return leads, sp.Commit(ctx)
		}
		if rerr := sp.Rollback(ctx); rerr != nil || attempt == 3 || !indexVanished(err) {
			return nil, err
		}
	}
}

// indexVanished says err is PostgreSQL's "cache lookup failed" of a
// relation dropped while a statement read its catalog rows.
func indexVanished(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgerrcode.InternalError && strings.HasPrefix(pe.Message, "cache lookup failed")
}

// IndexGaps returns the indexes a transform needs that its sources lack.
func (e *Engine) IndexGaps(ctx context.Context, q catalog.Querier, spec plan.Spec) ([]trellistype.SourceIndexGap, error) {
	var gaps []trellistype.SourceIndexGap
	seen := map[string]bool{}
	for _, need := range neededIndexes(spec) {
		g := need.gap
		// A table joined to two others on the same columns needs one index.
		k := g.Table + "\x00" + strings.Join(g.Columns, "\x00")
		if seen[k] {
			continue
		}
		seen[k] = true
		schema, name, _ := strings.Cut(g.Table, ".")
		if need.order != nil {
			missing, fix, err := e.orderGap(ctx, q, schema, name, need)
			if err != nil {
				return nil, err
			}
			if missing {
				g.Fix = cmp.Or(fix, g.Fix)
				gaps = append(gaps, g)
			}
			continue
		}
		leads, err := indexLeads(ctx, q, ident.Qualified(schema, name), len(g.Columns))
		if err != nil {
			return nil, err
		}
		want := make([]string, len(g.Columns))
		for i, c := range g.Columns {
			want[i] = normalizeExpr(c)
		}
		slices.Sort(want)
		found := false
		for _, lead := range leads {
			have := make([]string, len(lead))
			for i, c := range lead {
				have[i] = normalizeExpr(c)
			}
			slices.Sort(have)
			if slices.Equal(have, want) {
				found = true
				break
			}
		}
		if !found {
			var probed []string
			g.Fix, g.NoFix, probed = e.indexFix(ctx, plan.Source{Schema: schema, Table: name}, need.alias, need.exprs, g.Fix)
			// The columns as PostgreSQL renders them ('day'::text for
			// 'day'), compared with the table's indexes again.
			if probed != nil {
				for i := range probed {
					probed[i] = normalizeExpr(probed[i])
				}
				slices.Sort(probed)
				for _, lead := range leads {
					have := make([]string, len(lead))
					for i, c := range lead {
						have[i] = normalizeExpr(c)
					}
					slices.Sort(have)
					found = found || slices.Equal(have, probed)
				}
			}
		}
		if !found {
			gaps = append(gaps, g)
		}
	}
	return gaps, nil
}

// indexFix is the CREATE INDEX statement over exprs (as the definition
// writes them, qualified by alias) that PostgreSQL accepts for table,
// found by creating it on an empty copy of the table named as the alias,
// in a transaction that is rolled back, and rendering it back; or "" and
// why no index can serve. A fix that cannot be checked (the database
// refusing a temporary table, say) is the text written from the
// definition. Results are cached by table and expressions.
func (e *Engine) indexFix(ctx context.Context, table plan.Source, alias string, exprs []string, written string) (string, string, []string) {
	return e.indexFixOrdered(ctx, table, alias, exprs, nil, written)
}

// indexFixOrdered is indexFix with each expression's index options
// (suffixes[i], as " DESC NULLS LAST"; none when nil).
func (e *Engine) indexFixOrdered(ctx context.Context, table plan.Source, alias string, exprs, suffixes []string, written string) (string, string, []string) {
	type fix struct {
		fix, noFix string
		leads      []string
	}
	key := table.Schema + "\x00" + table.Table + "\x00" + alias + "\x00" + strings.Join(exprs, "\x00") + "\x00" + strings.Join(suffixes, "\x00")
	if f, ok := e.indexFixes.Load(key); ok {
		return f.(fix).fix, f.(fix).noFix, slices.Clone(f.(fix).leads)
	}
	var leads []string
	parts := make([]string, len(exprs))
	for i, x := range exprs {
		parts[i] = "(" + x + ")"
		if i < len(suffixes) {
			parts[i] += suffixes[i]
		}
	}
	var def string
	err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(sqlIndexProbeTable, ident.Quote(alias), ident.Qualified(table.Schema, table.Table))); err != nil {
			return err
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, fmt.Sprintf(sqlIndexProbe, ident.Quote(alias), strings.Join(parts, ", "))); err != nil {
			return err
		}
		if err := sp.QueryRow(ctx, sqlIndexProbeDef, len(exprs)).Scan(&def, &leads); err != nil {
			return err
		}
		return errRollback
	})
	var f fix
	switch {
	case errors.Is(err, errRollback):
		_, cols, ok := strings.Cut(def, " USING ")
		if !ok {
			return written, "", nil
		}
		f.fix = "CREATE INDEX ON " + ident.Qualified(table.Schema, table.Table) + " USING " + cols + ";"
		f.leads = leads
	case pgerr.InClass(pgerr.Code(err), pgerrcode.SyntaxErrorOrAccessRuleViolation, pgerrcode.ObjectNotInPrerequisiteState, pgerrcode.FeatureNotSupported):
		f.noFix = "no index can serve it: " + pgMessage(err)
	default:
		return written, "", nil // not checked; not cached
	}
	e.indexFixes.Store(key, f)
	return f.fix, f.noFix, slices.Clone(f.leads)
}

// errRollback ends a transaction that was only a check.
var errRollback = errors.New("rolled back")

// pgMessage is a PostgreSQL error's message, or the error's text.
func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// Corrections lists the partitions a transform is being corrected for.
func (e *Engine) Corrections(ctx context.Context, q catalog.Querier, id int) ([]trellistype.CorrectingNode, error) {
	rows, err := q.Query(ctx, e.Cat.SQL(sqlCorrections), id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (trellistype.CorrectingNode, error) {
		var c trellistype.CorrectingNode
		err := r.Scan(&c.Node, &c.Since)
		return c, err
	})
}

// PausedUpstream lists the paused columns ("transform.column") of
// transforms whose targets t reads, that t reads.
func (e *Engine) PausedUpstream(ctx context.Context, q catalog.Querier, t *catalog.Transform) ([]string, error) {
	all, _, err := e.Cat.Transforms(ctx, q)
	if err != nil {
		return nil, err
	}
	out := []string{}
	sides := t.Spec.Sources()
	reads := [][]string{t.Spec.Reads}
	for _, j := range t.Spec.JoinList() {
		reads = append(reads, j.Source.Reads)
	}
	for _, up := range all {
		for i, s := range sides {
			if up.Target.Schema != s.Schema || up.Target.Name != s.Table {
				continue
			}
			for _, c := range up.Spec.Columns {
				if c.Paused && slices.Contains(reads[i], c.Name) {
					out = append(out, up.Target.Name+"."+c.Name)
				}
			}
		}
	}
	return out, nil
}
