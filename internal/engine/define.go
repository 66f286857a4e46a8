package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/plan"
)

// side is one table of a definition, resolved.
type side struct {
	rel      *relation
	alias    string
	keyCols  []string
	keyTypes []string
	columns  map[string]string // column name -> type
	id       int
}

func (e *Engine) loadSide(ctx context.Context, tx pgx.Tx, ref grammar.TableRef) (*side, error) {
	rel, err := e.resolve(ctx, tx, ref.Table, e.TargetSchema)
	if err != nil {
		return nil, err
	}
	if rel == nil {
		return nil, errs.New(errs.NotFound, "source table %s does not exist", ref.Table)
	}
	if rel.kind != "r" && rel.kind != "p" {
		return nil, errs.New(errs.Validation, "source %s.%s is not a table", rel.schema, rel.name)
	}
	if rel.schema == e.Cat.Schema {
		return nil, errs.New(errs.Validation, "source %s.%s is one of Trellis's own tables", rel.schema, rel.name)
	}
	s := &side{rel: rel, alias: ref.Alias, columns: map[string]string{}}
	if s.alias == "" {
		s.alias = rel.name
	}
	rows, err := tx.Query(ctx, sqlPrimaryKey, rel.oid)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var c, t string
		if err := rows.Scan(&c, &t); err != nil {
			rows.Close()
			return nil, err
		}
		s.keyCols, s.keyTypes = append(s.keyCols, c), append(s.keyTypes, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(s.keyCols) == 0 {
		return nil, errs.New(errs.Validation, "source table %s.%s has no primary key: Trellis needs one to know which rows changed", rel.schema, rel.name)
	}
	rows, err = tx.Query(ctx, sqlColumns, rel.oid)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var c, t string
		if err := rows.Scan(&c, &t); err != nil {
			rows.Close()
			return nil, err
		}
		s.columns[c] = t
	}
	rows.Close()
	return s, rows.Err()
}

// sideOf says which side a column reference belongs to: 0 the FROM table,
// 1 the joined one.
func sideOf(ref grammar.ColumnRef, sides []*side) (int, error) {
	var found []int
	for i, s := range sides {
		if ref.Qualifier != "" && ref.Qualifier != s.alias && ref.Qualifier != s.rel.name {
			continue
		}
		if _, ok := s.columns[ref.Column]; ok {
			found = append(found, i)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return 0, errs.New(errs.Validation, "column %s does not exist in the transform's tables", refString(ref))
	}
	return 0, errs.New(errs.Validation, "column reference %s is ambiguous: qualify it with a table alias", refString(ref))
}

func refString(r grammar.ColumnRef) string {
	if r.Qualifier == "" {
		return r.Column
	}
	return r.Qualifier + "." + r.Column
}

// isColumn reports whether a select item is exactly the given column of a side.
func isColumn(it grammar.SelectItem, s *side, col string, sides []*side) bool {
	if len(it.Columns) != 1 || it.Columns[0].Column != col {
		return false
	}
	if i, err := sideOf(it.Columns[0], sides); err != nil || sides[i] != s {
		return false
	}
	e := strings.ReplaceAll(it.Expr, `"`, "")
	return e == col || e == s.alias+"."+col || e == s.rel.name+"."+col
}

func (e *Engine) define(ctx context.Context, s *grammar.Transform, text string) (Result, error) {
	if len(s.Joins) > 1 {
		return Result{}, errs.New(errs.Validation, "a transform may have one JOIN")
	}
	if len(s.GroupBy) == 0 {
		for _, it := range s.Select {
			if it.HasAggregate {
				return Result{}, errs.New(errs.Validation, "column %s uses an aggregate: aggregates need GROUP BY", it.Name)
			}
		}
	}
	tgt := e.target(s.Target)
	if tgt.Schema == e.Cat.Schema {
		return Result{}, errs.New(errs.Validation, "a target cannot be created in Trellis's catalog schema %q", e.Cat.Schema)
	}
	err := e.inTx(ctx, func(tx pgx.Tx) error {
		from, err := e.loadSide(ctx, tx, s.From)
		if err != nil {
			return err
		}
		sides := []*side{from}
		if len(s.Joins) == 1 {
			joined, err := e.loadSide(ctx, tx, s.Joins[0].Table)
			if err != nil {
				return err
			}
			if joined.alias == from.alias {
				return errs.New(errs.Validation, "the joined table needs an alias different from %s", from.alias)
			}
			sides = append(sides, joined)
		}
		existing, err := e.Cat.Transform(ctx, tx, tgt, false)
		if err != nil {
			return err
		}
		if existing != nil {
			return errs.New(errs.Conflict, "a transform already writes %s", tgt)
		}
		if r, err := e.resolve(ctx, tx, grammar.Name{Schema: tgt.Schema, Name: tgt.Name}, ""); err != nil {
			return err
		} else if r != nil {
			return errs.New(errs.Conflict, "table %s already exists: a transform creates its own target table", tgt)
		}
		if err := e.checkFunctions(ctx, tx, s.Functions, len(s.GroupBy) > 0); err != nil {
			return err
		}
		spec, needs, err := buildSpec(s, sides)
		if err != nil {
			return err
		}
		for i, sd := range sides {
			if err := e.registerSource(ctx, tx, sd, needs[i]); err != nil {
				return err
			}
		}
		spec.Source.ID = from.id
		if spec.Join != nil {
			spec.Join.Source.ID = sides[1].id
		}
		pl := &plan.Plan{Target: tgt, Spec: spec}
		ddl := pl.CreateTarget()
		if pl.Kind() != plan.KindProjection {
			ddl = pl.CreateShapeTarget()
		}
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return pgValidation(err, "creating target %s", tgt)
		}
		if err := e.recordTypes(ctx, tx, tgt, &spec); err != nil {
			return err
		}
		specJSON, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		var tid int
		if err := tx.QueryRow(ctx, e.Cat.SQL(sqlInsertTransform), tgt.Schema, tgt.Name, text, specJSON).Scan(&tid); err != nil {
			return err
		}
		for _, sd := range sides {
			if _, err := tx.Exec(ctx, e.Cat.SQL(sqlInsertTransformSource)+" ON CONFLICT DO NOTHING", tid, sd.id); err != nil {
				return err
			}
		}
		if err := e.Cat.BumpGen(ctx, tx); err != nil {
			return err
		}
		return e.notifyStaging(ctx, tx)
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Kind: "defined", Target: tgt.String()}, nil
}

// registerSource records a source (or widens what its capture records)
// and sets sd.id.
func (e *Engine) registerSource(ctx context.Context, tx pgx.Tx, sd *side, needs []string) error {
	var capCols []string
	err := tx.QueryRow(ctx, e.Cat.SQL(sqlUpsertSource), sd.rel.schema, sd.rel.name, sd.keyCols, sd.keyTypes, sd.rel.kind == "p").
		Scan(&sd.id, &sd.keyCols, &sd.keyTypes, &capCols)
	if err != nil {
		return fmt.Errorf("registering source %s.%s: %w", sd.rel.schema, sd.rel.name, err)
	}
	var add, addTypes []string
	for _, c := range needs {
		if !slices.Contains(capCols, c) && !slices.Contains(add, c) {
			add, addTypes = append(add, c), append(addTypes, sd.columns[c])
		}
	}
	if len(add) == 0 {
		return nil
	}
	// Widen: capture must record these columns' old values too. The staging
	// worker re-installs it; the transform builds once that is done.
	_, err = tx.Exec(ctx, e.Cat.SQL(sqlWidenSource), sd.id, add, addTypes)
	return err
}

// recordTypes reads the target's column types into the spec.
func (e *Engine) recordTypes(ctx context.Context, tx pgx.Tx, tgt plan.Target, spec *plan.Spec) error {
	rows, err := tx.Query(ctx, sqlTargetTypes, tgt.Quoted())
	if err != nil {
		return err
	}
	types := map[string]string{}
	for rows.Next() {
		var n, t string
		if err := rows.Scan(&n, &t); err != nil {
			rows.Close()
			return err
		}
		types[n] = t
	}
	rows.Close()
	for i := range spec.Key {
		spec.Key[i].Type = types[spec.Key[i].Name]
	}
	for i := range spec.Columns {
		spec.Columns[i].Type = types[spec.Columns[i].Name]
	}
	return rows.Err()
}

// buildSpec compiles a parsed TRANSFORM over resolved tables into a spec,
// and the columns each side needs captured.
func buildSpec(s *grammar.Transform, sides []*side) (plan.Spec, [][]string, error) {
	from := sides[0]
	spec := plan.Spec{
		Source:             plan.Source{Schema: from.rel.schema, Table: from.rel.name, Alias: s.From.Alias, KeyCols: from.keyCols, KeyTypes: from.keyTypes},
		Where:              s.Where,
		GroupBy:            s.GroupBy,
		WithoutSourceIndex: s.WithoutSourceIndex,
	}
	needs := make([][]string, len(sides))
	need := func(i int, col string) {
		if !slices.Contains(needs[i], col) {
			needs[i] = append(needs[i], col)
		}
	}
	var reads []grammar.ColumnRef
	var joinedReads []string
	for _, it := range s.Select {
		reads = append(reads, it.Columns...)
	}
	reads = append(reads, s.WhereColumns...)
	reads = append(reads, s.GroupByColumns...)
	for _, r := range reads {
		i, err := sideOf(r, sides)
		if err != nil {
			return spec, nil, err
		}
		if i == 0 && !slices.Contains(spec.Reads, r.Column) {
			spec.Reads = append(spec.Reads, r.Column)
		}
		if i == 1 && !slices.Contains(joinedReads, r.Column) {
			joinedReads = append(joinedReads, r.Column)
		}
	}
	if len(sides) == 2 {
		j := s.Joins[0]
		joined := sides[1]
		spec.Join = &plan.Join{Left: j.Kind == grammar.JoinLeft,
			Source: plan.Source{Schema: joined.rel.schema, Table: joined.rel.name, Alias: j.Table.Alias, KeyCols: joined.keyCols, KeyTypes: joined.keyTypes}}
		for _, c := range j.On {
			l, err := sideOf(c.Left, sides)
			if err != nil {
				return spec, nil, err
			}
			r, err := sideOf(c.Right, sides)
			if err != nil {
				return spec, nil, err
			}
			if l == r {
				return spec, nil, errs.New(errs.Validation, "each ON equality must compare a column of %s with a column of %s", from.alias, joined.alias)
			}
			fc, jc := c.Left.Column, c.Right.Column
			if l == 1 {
				fc, jc = jc, fc
			}
			spec.Join.On = append(spec.Join.On, plan.JoinOn{From: fc, Joined: jc})
			need(0, fc)
			need(1, jc)
		}
	}
	items := s.Select
	switch {
	case len(s.GroupBy) > 0:
		groupSide := -1
		for _, r := range s.GroupByColumns {
			i, err := sideOf(r, sides)
			if err != nil {
				return spec, nil, err
			}
			if groupSide >= 0 && i != groupSide {
				return spec, nil, errs.New(errs.Validation, "the GROUP BY expressions of a JOIN must all read columns of one of its tables")
			}
			groupSide = i
			need(i, r.Column)
		}
		if groupSide < 0 {
			return spec, nil, errs.New(errs.Validation, "GROUP BY needs at least one column")
		}
		spec.GroupJoined = groupSide == 1
		for _, g := range s.GroupBy {
			idx := slices.IndexFunc(items, func(it grammar.SelectItem) bool { return it.Expr == g })
			if idx < 0 {
				return spec, nil, errs.New(errs.Validation, "GROUP BY expression %s must also be selected, with a name: it is the target's key", g)
			}
			spec.Key = append(spec.Key, plan.Column{Name: items[idx].Name, Expr: g})
		}
		for _, it := range items {
			if !slices.ContainsFunc(spec.Key, func(k plan.Column) bool { return k.Name == it.Name }) {
				spec.Columns = append(spec.Columns, plan.Column{Name: it.Name, Expr: it.Expr})
			}
		}
	case len(sides) == 2:
		// The target's key is both sides' keys: a selected column that is a
		// key column serves as it, else a column <alias>_<column> is added.
		used := map[int]bool{}
		for _, sd := range sides {
			for _, k := range sd.keyCols {
				name := sd.alias + "_" + k
				idx := slices.IndexFunc(items, func(it grammar.SelectItem) bool { return isColumn(it, sd, k, sides) })
				if idx >= 0 && !used[idx] {
					used[idx] = true
					name = items[idx].Name
				} else if slices.ContainsFunc(items, func(it grammar.SelectItem) bool { return it.Name == name }) {
					return spec, nil, errs.New(errs.Validation, "column %s is taken: the target needs it for the key column %s.%s; select the key column as it is instead", name, sd.alias, k)
				}
				spec.Key = append(spec.Key, plan.Column{Name: name, Expr: ident.Quote(sd.alias) + "." + ident.Quote(k)})
			}
		}
		for i, it := range items {
			if !used[i] {
				spec.Columns = append(spec.Columns, plan.Column{Name: it.Name, Expr: it.Expr})
			}
		}
	default:
		for _, it := range items {
			if slices.Contains(from.keyCols, it.Name) {
				if isColumn(it, from, it.Name, sides) {
					continue // the key column itself: the target has it already
				}
				return spec, nil, errs.New(errs.Validation, "column %s is the target's key (the source's primary key column): give the expression another name", it.Name)
			}
			spec.Columns = append(spec.Columns, plan.Column{Name: it.Name, Expr: it.Expr})
		}
	}
	spec.Source.Needs = needs[0]
	if spec.Join != nil {
		spec.Join.Source.Needs = needs[1]
		for _, on := range spec.Join.On {
			if !slices.Contains(joinedReads, on.Joined) {
				joinedReads = append(joinedReads, on.Joined)
			}
			if !slices.Contains(spec.Reads, on.From) {
				spec.Reads = append(spec.Reads, on.From)
			}
		}
		spec.Join.Source.Reads = joinedReads
	}
	if err := recordColumnReads(&spec, s, sides); err != nil {
		return spec, nil, err
	}
	return spec, needs, nil
}

// recordColumnReads records which source columns each non-key column
// reads, and which the rest of the definition does, so that ALTER
// TRANSFORM can keep Reads exact.
func recordColumnReads(spec *plan.Spec, s *grammar.Transform, sides []*side) error {
	for i, c := range spec.Columns {
		idx := slices.IndexFunc(s.Select, func(it grammar.SelectItem) bool { return it.Name == c.Name })
		if idx < 0 {
			continue
		}
		from, joined, err := readsBySide(s.Select[idx].Columns, sides)
		if err != nil {
			return err
		}
		spec.Columns[i].Reads, spec.Columns[i].JoinedReads = from, joined
	}
	base := append(append([]grammar.ColumnRef(nil), s.WhereColumns...), s.GroupByColumns...)
	for _, k := range spec.Key {
		if idx := slices.IndexFunc(s.Select, func(it grammar.SelectItem) bool { return it.Name == k.Name }); idx >= 0 {
			base = append(base, s.Select[idx].Columns...)
		}
	}
	from, joined, err := readsBySide(base, sides)
	if err != nil {
		return err
	}
	for _, k := range spec.Source.KeyCols {
		from = appendNew(from, k)
	}
	if spec.Join != nil {
		for _, on := range spec.Join.On {
			from = appendNew(from, on.From)
			joined = appendNew(joined, on.Joined)
		}
		for _, k := range spec.Join.Source.KeyCols {
			joined = appendNew(joined, k)
		}
		spec.Join.BaseReads = joined
	}
	spec.BaseReads = from
	spec.PerColumnReads = true
	return nil
}

// specSides loads the tables of a registered definition as define saw
// them, to tell which table a column reference of an ALTER reads.
func (e *Engine) specSides(ctx context.Context, tx pgx.Tx, spec plan.Spec) ([]*side, error) {
	refs := []grammar.TableRef{{Table: grammar.Name{Schema: spec.Source.Schema, Name: spec.Source.Table}, Alias: spec.Source.Alias}}
	if j := spec.Join; j != nil {
		refs = append(refs, grammar.TableRef{Table: grammar.Name{Schema: j.Source.Schema, Name: j.Source.Table}, Alias: j.Source.Alias})
	}
	var sides []*side
	for _, r := range refs {
		sd, err := e.loadSide(ctx, tx, r)
		if err != nil {
			return nil, err
		}
		sides = append(sides, sd)
	}
	return sides, nil
}

// readsBySide splits column references into the FROM table's columns and
// the joined table's.
func readsBySide(refs []grammar.ColumnRef, sides []*side) (from, joined []string, err error) {
	for _, r := range refs {
		i, err := sideOf(r, sides)
		if err != nil {
			return nil, nil, err
		}
		if i == 0 {
			from = appendNew(from, r.Column)
		} else {
			joined = appendNew(joined, r.Column)
		}
	}
	return from, joined, nil
}

func appendNew(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}
