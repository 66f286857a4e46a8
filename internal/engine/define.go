package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/funcwatch"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

// side is one table of a definition, resolved: what compilation reads
// (plan.Table), and what registering it as a source needs.
type side struct {
	plan.Table
	rel *relation
	id  int
}

func (e *Engine) loadSide(ctx context.Context, tx pgx.Tx, ref grammar.TableRef) (*side, error) {
	rel, err := e.resolve(ctx, tx, ref.Table, e.TargetSchema)
	if err != nil {
		return nil, err
	}
	if rel == nil {
		return nil, errs.New(trellistype.CodeNotFound, "source table %s does not exist", ref.Table)
	}
	switch rel.kind {
	case "m":
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s is a materialized view: REFRESH replaces its rows, which no capture sees; read the tables of its query in the transform instead", rel.schema, rel.name)
	case "f":
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s is a foreign table: its rows change outside this database, where no capture sees them", rel.schema, rel.name)
	}
	if rel.kind != "r" && rel.kind != "p" {
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s is not a table", rel.schema, rel.name)
	}
	if rel.schema == e.Cat.Schema {
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s is one of Trellis's own tables", rel.schema, rel.name)
	}
	var temp, system, parent, partition bool
	var parentOf string
	if err := tx.QueryRow(ctx, sqlSourceFacts, rel.oid).Scan(&temp, &system, &parent, &parentOf, &partition); err != nil {
		return nil, err
	}
	switch {
	case temp:
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s is a temporary table: it lives only in one session, which Trellis's workers cannot read", rel.schema, rel.name)
	case system:
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s is a system catalog: it cannot be captured", rel.schema, rel.name)
	case parent:
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s has inheritance children: writes to them would not reach the target; read the children themselves, or make it a partitioned table", rel.schema, rel.name)
	case partition:
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s is a partition of %s: rows inserted through %s would not reach the target; define the transform over %s", rel.schema, rel.name, parentOf, parentOf, parentOf)
	case parentOf != "":
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s inherits from %s: rows updated or deleted through %s would not reach the target; end the inheritance (ALTER TABLE ... NO INHERIT %s) first", rel.schema, rel.name, parentOf, parentOf, parentOf)
	}
	if cats, err := e.catalogSchemas(ctx, tx); err != nil {
		return nil, err
	} else if slices.Contains(cats, rel.schema) {
		return nil, errs.New(trellistype.CodeValidation, "source %s.%s is a table of a Trellis catalog", rel.schema, rel.name)
	}
	s := &side{rel: rel, Table: plan.Table{Schema: rel.schema, Name: rel.name, Alias: ref.Alias, Columns: map[string]string{}}}
	if s.Alias == "" {
		s.Alias = rel.name
	}
	if err := e.readKey(ctx, tx, s); err != nil {
		return nil, err
	}
	if len(s.KeyCols) == 0 {
		nulls, err := e.keyTarget(ctx, tx, rel)
		if err != nil {
			return nil, err
		}
		if nulls != nil {
			err = e.readNullableKey(ctx, tx, s, nulls)
		} else {
			err = e.readKey(ctx, tx, s)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(s.KeyCols) == 0 {
		return nil, errs.New(trellistype.CodeValidation, "source table %s.%s has no primary key, nor a unique index over NOT NULL columns: Trellis needs one to know which rows changed", rel.schema, rel.name)
	}
	cols, err := pinnedPairs(ctx, tx, sqlColumns, rel.oid)
	if err != nil {
		return nil, err
	}
	for _, ct := range cols {
		s.Columns[ct[0]] = ct[1]
		s.Order = append(s.Order, ct[0])
	}
	return s, nil
}

// readKey reads the columns of the index that identifies a side's rows
// (none when it has no such index).
func (e *Engine) readKey(ctx context.Context, tx pgx.Tx, s *side) error {
	cols, err := pinnedPairs(ctx, tx, sqlPrimaryKey, s.rel.oid)
	if err != nil {
		return err
	}
	s.KeyCols, s.KeyTypes = nil, nil
	for _, ct := range cols {
		s.KeyCols, s.KeyTypes = append(s.KeyCols, ct[0]), append(s.KeyTypes, ct[1])
	}
	return nil
}

// readNullableKey reads the columns of a Trellis target's unique index
// NULLS NOT DISTINCT, which identifies its rows by a key that may be NULL
// (decision 0049), and which of them may be: those nulls (the upstream's
// plan, by key position) says may, unless the column is NOT NULL.
func (e *Engine) readNullableKey(ctx context.Context, tx pgx.Tx, s *side, nulls []bool) error {
	cols, err := pinnedPairs(ctx, tx, sqlNullableKey, s.rel.oid)
	if err != nil {
		return err
	}
	s.KeyCols, s.KeyTypes, s.KeyNulls = nil, nil, nil
	for i, ct := range cols {
		var notNull bool
		if err := tx.QueryRow(ctx, sqlColumnNotNull, ident.Qualified(s.rel.schema, s.rel.name), ct[0]).Scan(&notNull); err != nil {
			return err
		}
		s.KeyCols, s.KeyTypes = append(s.KeyCols, ct[0]), append(s.KeyTypes, ct[1])
		s.KeyNulls = append(s.KeyNulls, !notNull && (i >= len(nulls) || nulls[i]))
	}
	return nil
}

// keyTarget lets a chain read a GROUP BY or JOIN target, which is keyed by
// a unique index over nullable columns (NULLS NOT DISTINCT). A key that
// cannot be NULL (an inner join's, both sides' keys; a GROUP BY of NOT
// NULL columns; a set operation's whose every branch fills each key
// column with a NOT NULL column, decision 0040) is made NOT NULL, so the
// index identifies its rows as a primary key would. Any other key may be
// NULL: the target is left as it is, and its reader reads it through the
// index, NULL parts and all (decision 0049): nulls says which of its key
// columns may be NULL (nil: none). Anything else than a Trellis target
// with a key is left alone.
func (e *Engine) keyTarget(ctx context.Context, tx pgx.Tx, rel *relation) (nulls []bool, err error) {
	up, err := e.Cat.Transform(ctx, tx, plan.Target{Schema: rel.schema, Name: rel.name}, false)
	if err != nil || up == nil {
		return nil, err
	}
	pl := up.Plan()
	if pl.Kind() == plan.KindProjection {
		return nil, nil // keyed by its primary key already
	}
	if up.Spec.SetOp != nil && len(pl.KeyNames()) > 0 {
		// NOT NULL when each branch fills each key column with a NOT NULL
		// column of a table its every row holds.
		reads, nullable := pl.SetOpKeyReads()
		if nullable != "" {
			return pl.KeyNulls(), nil
		}
		for _, r := range reads {
			var notNull bool
			if err := tx.QueryRow(ctx, sqlColumnNotNull, ident.Qualified(r.Source.Schema, r.Source.Table), r.Column).Scan(&notNull); err != nil {
				return nil, err
			}
			if !notNull {
				return pl.KeyNulls(), nil
			}
		}
		return nil, keyNotNull(ctx, tx, up, pl)
	}
	if len(pl.KeyNames()) == 0 {
		return nil, errs.New(trellistype.CodeValidation,
			"%s cannot be read by a transform: an aggregate without GROUP BY has one row and no key column; read its sources instead", up.Target)
	}
	// A join's key, and a window's after its PARTITION BY outputs, hold its
	// tables' keys: one that may be NULL stays so (a chain's projection,
	// join or window over a join, decisions 0054, 0062).
	rowKeys := pl.Kind() == plan.KindJoin || (pl.Kind() == plan.KindWindow && len(up.Spec.Key) > len(up.Spec.Window.Partition))
	if rowKeys && up.Spec.NullableKeys(0) {
		return pl.KeyNulls(), nil
	}
	if pl.FullUnits() {
		return pl.KeyNulls(), nil // a FULL JOIN's, or a RIGHT JOIN's after the second table
	}
	outer := slices.ContainsFunc(up.Spec.JoinList(), func(j *plan.Join) bool { return j.Left || j.Right || j.Full })
	if pl.Kind() == plan.KindJoin && outer {
		return pl.KeyNulls(), nil // NULL on the optional side of a row without a match
	}
	if pl.Kind() == plan.KindWindow && len(up.Spec.Key) > len(up.Spec.Window.Partition) && outer {
		return pl.KeyNulls(), nil // NULL for a table the join leaves out
	}
	if pl.Kind() == plan.KindAggregate || pl.Kind() == plan.KindWindow {
		// A window's key is its PARTITION BY outputs, then its rows' key
		// (never NULL over a table or an inner join).
		if pl.GroupNullable() {
			return pl.KeyNulls(), nil // grouped by a table an outer join may leave out
		}
		side := up.Spec.Sources()[up.Spec.GroupPos()]
		unit := up.Spec.GroupBy
		if w := up.Spec.Window; w != nil {
			unit = w.Partition
		}
		for _, g := range unit {
			m := plainColumn.FindStringSubmatch(g)
			var notNull bool
			if m != nil {
				col := m[1]
				if !strings.Contains(g, `"`) {
					col = strings.ToLower(col) // an unquoted name folds to lower case
				}
				if err := tx.QueryRow(ctx, sqlColumnNotNull, ident.Qualified(side.Schema, side.Table), col).Scan(&notNull); err != nil {
					return nil, err
				}
			}
			if !notNull {
				return pl.KeyNulls(), nil // an expression, or a column that may be NULL
			}
		}
	}
	return nil, keyNotNull(ctx, tx, up, pl)
}

// keyNotNull makes the key columns of a transform's target NOT NULL for a
// transform reading it, refusing the reader when a key holds NULL.
func keyNotNull(ctx context.Context, tx pgx.Tx, up *catalog.Transform, pl *plan.Plan) error {
	keys := pl.KeyNames()
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, pl.KeyNotNull()); err != nil {
		_ = sp.Rollback(ctx)
		if pgerr.Is(err, pgerrcode.NotNullViolation) {
			return errs.New(trellistype.CodeValidation,
				"%s cannot be read by a transform: its key (%s) holds NULL, and a transform reading it needs a key without NULLs (GROUP BY coalesce(...) or a NOT NULL column)",
				up.Target, strings.Join(keys, ", "))
		}
		return fmt.Errorf("making the key of %s NOT NULL for its reader: %w", up.Target, err)
	}
	return sp.Commit(ctx)
}

// compile checks a TRANSFORM statement against the catalog and the
// tables it reads, and compiles it: the resolved sides, the spec, and the
// columns whose old values each side's capture must record. It changes
// nothing but a chain's upstream key (keyTarget), in tx.
func (e *Engine) compile(ctx context.Context, tx pgx.Tx, s *grammar.Transform, text string) ([]*side, plan.Spec, [][]string, error) {
	if tgt := e.target(s.Target); tgt.Schema == e.Cat.Schema {
		return nil, plan.Spec{}, nil, errs.New(trellistype.CodeValidation, "a target cannot be created in Trellis's catalog schema %q", e.Cat.Schema)
	}
	s, views, err := e.expandViews(ctx, tx, s, text)
	if err != nil {
		return nil, plan.Spec{}, nil, err
	}
	if s.SetOp != nil {
		sides, spec, needs, err := e.compileSetOp(ctx, tx, s)
		spec.Views = views
		if err == nil {
			err = checkNullableKeys(spec)
		}
		return sides, spec, needs, err
	}
	sides, err := e.loadSides(ctx, tx, s)
	if err != nil {
		return nil, plan.Spec{}, nil, err
	}
	if s, err = plan.Resolve(s, tables(sides)); err != nil {
		return nil, plan.Spec{}, nil, err
	}
	if err := e.checkFunctions(ctx, tx, s.Functions, s.Aggregated(), s.WindowFunctions...); err != nil {
		return nil, plan.Spec{}, nil, err
	}
	spec, needs, err := plan.Compile(s, tables(sides))
	if err != nil {
		return nil, plan.Spec{}, nil, err
	}
	spec.Views = views
	if err := checkNotIn(ctx, tx, spec); err != nil {
		return nil, plan.Spec{}, nil, err
	}
	if err := checkNullableKeys(spec); err != nil {
		return nil, plan.Spec{}, nil, err
	}
	return sides, spec, needs, nil
}

// checkNullableKeys refuses a definition that cannot read a source whose
// key may be NULL (see plan.NullableKeyRefusal).
func checkNullableKeys(spec plan.Spec) error {
	if why := (&plan.Plan{Spec: spec}).NullableKeyRefusal(); why != "" {
		return errs.New(trellistype.CodeValidation, "%s", why)
	}
	return nil
}

// checkNotIn refuses NOT IN (SELECT ...) over a column that may be NULL:
// SQL's NOT IN is unknown for every row once the subquery yields a NULL,
// and for a NULL outer value whenever it yields anything, which no
// affected-keys query follows. NOT EXISTS says what is usually meant.
func checkNotIn(ctx context.Context, tx pgx.Tx, spec plan.Spec) error {
	sources := spec.Sources()
	for _, sj := range spec.Semis {
		if !sj.Anti || !sj.In {
			continue
		}
		outer := sources[sj.To]
		if (&plan.Plan{Spec: spec}).MayBeMissing(sj.To) {
			// A NULL-extended row's NOT IN is true while the subquery
			// yields no row and unknown once it yields any: a change of
			// any of its rows can flip it, which no correlation follows.
			return errs.New(trellistype.CodeValidation,
				"NOT IN (SELECT %s ...) over %s.%s, a table an outer join may leave out of a row, is not supported (a row without it passes NOT IN only while the subquery is empty): use NOT EXISTS (SELECT 1 FROM %s WHERE %s.%s = %s.%s)",
				sj.On[0].Joined, outer.Table, sj.On[0].From, sj.Source.Table, cmp.Or(sj.Source.Alias, sj.Source.Table), sj.On[0].Joined, cmp.Or(outer.Alias, outer.Table), sj.On[0].From)
		}
		for _, c := range []struct {
			src plan.Source
			col string
		}{{outer, sj.On[0].From}, {sj.Source, sj.On[0].Joined}} {
			var notNull bool
			if err := tx.QueryRow(ctx, sqlColumnNotNull, ident.Qualified(c.src.Schema, c.src.Table), c.col).Scan(&notNull); err != nil {
				return err
			}
			if !notNull {
				return errs.New(trellistype.CodeValidation,
					"NOT IN (SELECT %s ...) over %s.%s, which may be NULL, is not supported (one NULL makes NOT IN unknown for every row): use NOT EXISTS (SELECT 1 FROM %s WHERE %s.%s = %s.%s), or make both columns NOT NULL",
					sj.On[0].Joined, c.src.Table, c.col, sj.Source.Table, cmp.Or(sj.Source.Alias, sj.Source.Table), sj.On[0].Joined, cmp.Or(outer.Alias, outer.Table), sj.On[0].From)
			}
		}
	}
	return nil
}

// checkTargetFree refuses a target some transform writes already, or a
// table that exists: a transform creates its own target table.
func (e *Engine) checkTargetFree(ctx context.Context, tx pgx.Tx, tgt plan.Target) error {
	if cats, err := e.catalogSchemas(ctx, tx); err != nil {
		return err
	} else if slices.Contains(cats, tgt.Schema) || tgt.Schema == "pg_catalog" || tgt.Schema == "information_schema" {
		return errs.New(trellistype.CodeValidation, "a target cannot be created in schema %q: it is a Trellis catalog or PostgreSQL's own", tgt.Schema)
	}
	existing, err := e.Cat.Transform(ctx, tx, tgt, false)
	if err != nil {
		return err
	}
	if existing != nil {
		return errs.New(trellistype.CodeConflict, "a transform already writes %s", tgt)
	}
	if r, err := e.resolve(ctx, tx, grammar.Name{Schema: tgt.Schema, Name: tgt.Name}, ""); err != nil {
		return err
	} else if r != nil {
		return errs.New(trellistype.CodeConflict, "table %s already exists: a transform creates its own target table", tgt)
	}
	return nil
}

func (e *Engine) define(ctx context.Context, s *grammar.Transform, text string) (trellistype.Applied, error) {
	tgt := e.target(s.Target)
	err := e.inTx(ctx, func(tx pgx.Tx) error {
		// The target is checked after the tables it reads, as before.
		sides, spec, needs, err := e.compile(ctx, tx, s, text)
		if err != nil {
			return err
		}
		if err := e.checkTargetFree(ctx, tx, tgt); err != nil {
			return err
		}
		if err := e.qualify(ctx, tx, tgt, &spec); err != nil {
			return err
		}
		from := sides[0]
		for i, sd := range sides {
			if err := e.registerSource(ctx, tx, sd, needs[i]); err != nil {
				return err
			}
		}
		spec.Source.ID = from.id
		for i, j := range spec.JoinList() {
			j.Source.ID = sides[i+1].id
		}
		for i := range spec.Semis {
			spec.Semis[i].Source.ID = sides[1+len(spec.JoinList())+i].id
		}
		if spec.SetOp != nil {
			spec.SetOp.SetIDs(func(pos int) int { return sides[pos].id })
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
		if err := recordOps(ctx, tx, sides, &spec); err != nil {
			return err
		}
		if err := e.fitPartials(ctx, tx, tgt, &spec); err != nil {
			return err
		}
		if spec.Functions, err = funcwatch.Probe(ctx, tx, (&plan.Plan{Target: tgt, Spec: spec}).Query()); err != nil {
			return err
		}
		if err := checkVolatile(ctx, tx, (&plan.Plan{Target: tgt, Spec: spec}).Query()); err != nil {
			return err
		}
		if clock, err := funcwatch.ReadsClock(ctx, tx, spec.Functions); err != nil {
			return err
		} else if clock != "" {
			return errs.New(trellistype.CodeValidation, "%s", clock)
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
		return nil, err
	}
	return trellistype.TransformDefined{Target: tgt.String()}, nil
}

// pinnedPairs runs a query of (name, format_type) rows with the
// search_path pinned to pg_catalog, so that every type outside it comes
// out qualified: the definer's search_path resolved it, a worker's may
// not. The transaction's search_path is put back afterwards.
func pinnedPairs(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([][2]string, error) {
	var was string
	if err := tx.QueryRow(ctx, sqlSearchPath).Scan(&was); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, sqlSetSearchPath, ident.SearchPath); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, args...)
	var out [][2]string
	if err == nil {
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
			var p [2]string
			err := r.Scan(&p[0], &p[1])
			return p, err
		})
	}
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, sqlSetSearchPath, was); err != nil {
		return nil, err
	}
	return out, nil
}

// qualify records, in the spec's expressions, the schema of every function,
// aggregate, operator and type the definer's session resolved them to
// (pg_catalog's too): a worker then runs what the definer saw whatever its
// search_path, and nothing planted later in a schema on a search_path
// (a better-matching function in public) can take their place. It reads
// the dependencies of a temporary view over the definition's query, in a
// savepoint it rolls back. A name the definition resolved to two schemas
// is left as written.
func (e *Engine) qualify(ctx context.Context, tx pgx.Tx, tgt plan.Target, spec *plan.Spec) error {
	refs, err := e.namesReached(ctx, tx, tgt, spec)
	if err != nil {
		return fmt.Errorf("resolving the names the definition uses: %w", err)
	}
	before := nameStrings(refs)
	names := grammar.Schemas{Funcs: map[string]string{}, Types: map[string]string{}, Ops: map[string]string{}, Default: "pg_catalog"}
	seen := map[[2]string]int{}
	for _, x := range refs {
		seen[[2]string{x.kind, x.name}]++
	}
	for _, x := range refs {
		if seen[[2]string{x.kind, x.name}] != 1 {
			continue
		}
		switch x.kind {
		case "f":
			names.Funcs[x.name] = x.schema
		case "t":
			names.Types[x.name] = x.schema
		case "o":
			names.Ops[x.name] = x.schema
		}
	}
	q := func(expr *string) error {
		out, err := grammar.Qualify(*expr, names)
		if err != nil {
			return fmt.Errorf("qualifying %q: %w", *expr, err)
		}
		*expr = out
		return nil
	}
	for i := range spec.Key {
		if err := q(&spec.Key[i].Expr); err != nil {
			return err
		}
	}
	for i := range spec.Columns {
		if err := q(&spec.Columns[i].Expr); err != nil {
			return err
		}
	}
	for i := range spec.GroupBy {
		if err := q(&spec.GroupBy[i]); err != nil {
			return err
		}
	}
	if w := spec.Window; w != nil {
		for i := range w.Partition {
			if err := q(&w.Partition[i]); err != nil {
				return err
			}
		}
		if w.Rank != "" {
			if err := q(&w.Rank); err != nil {
				return err
			}
		}
	}
	if err := q(&spec.Where); err != nil {
		return err
	}
	if err := q(&spec.Having); err != nil {
		return err
	}
	if so := spec.SetOp; so != nil {
		for i := range so.Branches {
			b := &so.Branches[i]
			for j := range b.Keys {
				if err := q(&b.Keys[j]); err != nil {
					return err
				}
			}
			for j := range b.Cols {
				if err := q(&b.Cols[j]); err != nil {
					return err
				}
			}
			for j := range b.Outs {
				if err := q(&b.Outs[j]); err != nil {
					return err
				}
			}
			for j := range b.Units {
				if err := q(&b.Units[j]); err != nil {
					return err
				}
			}
			for j := range b.GroupBy {
				if err := q(&b.GroupBy[j]); err != nil {
					return err
				}
			}
			if err := q(&b.Having); err != nil {
				return err
			}
			if err := q(&b.Where); err != nil {
				return err
			}
		}
	}
	// The qualified definition must name exactly what the definer's did.
	after, err := e.namesReached(ctx, tx, tgt, spec)
	if err != nil {
		return errs.New(trellistype.CodeValidation, "the definition's names do not resolve the same once qualified (%v): qualify its functions, operators and types with their schemas", pgMessage(err))
	}
	if !slices.Equal(before, nameStrings(after)) {
		return errs.New(trellistype.CodeValidation, "the definition uses one name for objects of different schemas: qualify its functions, operators and types with their schemas")
	}
	return nil
}

// nameRef is a function ("f"), type ("t") or operator ("o") a query
// names, with the schema it resolved to.
type nameRef struct{ kind, name, schema string }

func (r nameRef) String() string { return r.kind + ":" + r.schema + "." + r.name }

// nameStrings are refs' text forms, in their order.
func nameStrings(refs []nameRef) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.String()
	}
	return out
}

// namesReached are the functions, types and operators a spec's query names
// (sqlNamesReached), sorted by their text form, read through a temporary
// view in a savepoint that is rolled back.
func (e *Engine) namesReached(ctx context.Context, tx pgx.Tx, tgt plan.Target, spec *plan.Spec) ([]nameRef, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sp.Rollback(context.WithoutCancel(ctx)) }()
	// The view resolves the definition's names as the definer's session
	// would; reading what it reaches runs pinned.
	if err := e.asDefiner(ctx, tx, func() error {
		_, err := sp.Exec(ctx, sqlNamesProbeView+(&plan.Plan{Target: tgt, Spec: *spec}).Query())
		return err
	}); err != nil {
		return nil, err
	}
	rows, err := sp.Query(ctx, sqlNamesReached, "pg_temp.trellis_names_probe")
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (nameRef, error) {
		var x nameRef
		err := r.Scan(&x.kind, &x.name, &x.schema)
		return x, err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b nameRef) int { return strings.Compare(a.String(), b.String()) })
	return out, sp.Rollback(ctx)
}

// checkVolatile refuses a definition whose query reaches a volatile
// function the parser could not see: behind an operator, a cast or a
// domain's CHECK (a recompute would not reproduce its result). It reads
// the dependencies of a temporary view over the query, in a savepoint it
// rolls back.
func checkVolatile(ctx context.Context, tx pgx.Tx, query string) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = sp.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := sp.Exec(ctx, sqlVolatilityProbeView+query); err != nil {
		return fmt.Errorf("reading the functions the definition reaches: %w", err)
	}
	rows, err := sp.Query(ctx, sqlVolatileReached, "pg_temp.trellis_volatility_probe")
	if err != nil {
		return err
	}
	fns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(fns) > 0 {
		return errs.New(trellistype.CodeValidation, "the definition reaches volatile function %s (through an operator, a cast or a domain's CHECK): a recompute would not give the same result; mark it IMMUTABLE or STABLE if it is, or do not use it", strings.Join(fns, ", "))
	}
	return sp.Rollback(ctx)
}

// catalogSchemas are the catalog schemas of every Trellis instance in the database.
func (e *Engine) catalogSchemas(ctx context.Context, tx pgx.Tx) ([]string, error) {
	ins, err := catalog.Instances(ctx, tx.Conn())
	if err != nil {
		return nil, fmt.Errorf("listing Trellis instances: %w", err)
	}
	out := []string{e.Cat.Schema}
	for _, in := range ins {
		out = append(out, in.CatalogSchema)
	}
	return out, nil
}

// registerSource records a source (or widens what its capture records)
// and sets sd.id.
func (e *Engine) registerSource(ctx context.Context, tx pgx.Tx, sd *side, needs []string) error {
	if err := refuseUserCasts(ctx, tx, sd, needs); err != nil {
		return err
	}
	capCols, err := e.sourceRow(ctx, tx, sd)
	if err != nil {
		return fmt.Errorf("registering source %s.%s: %w", sd.rel.schema, sd.rel.name, err)
	}
	var add, addTypes []string
	for _, c := range needs {
		if !slices.Contains(capCols, c) && !slices.Contains(add, c) {
			add, addTypes = append(add, c), append(addTypes, sd.Columns[c])
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

// refuseUserCasts refuses a side whose key or captured (GROUP BY, JOIN)
// columns have a type with a cast to or from text by a function of a
// user's: Trellis renders those values as text and reads them back, and the
// function would run with Trellis's rights (decision 0034).
func refuseUserCasts(ctx context.Context, tx pgx.Tx, sd *side, needs []string) error {
	types := slices.Clone(sd.KeyTypes)
	for _, c := range needs {
		if t, ok := sd.Columns[c]; ok {
			types = append(types, t)
		}
	}
	casts, err := funcwatch.UserCasts(ctx, tx, types)
	if err != nil || len(casts) == 0 {
		return err
	}
	return errs.New(trellistype.CodeValidation, "source %s.%s cannot be maintained: %s", sd.rel.schema, sd.rel.name, casts[0].Fix())
}

// sourceRow finds or creates the catalog row of a side's table, by name
// and OID, and returns the columns its capture records. A row left by a
// table of the same name that was dropped (another OID) is renewed for the
// table as it is now, and that table's remaining readers pause as
// disrupted.
func (e *Engine) sourceRow(ctx context.Context, tx pgx.Tx, sd *side) ([]string, error) {
	var rel *int64
	err := tx.QueryRow(ctx, e.Cat.SQL(sqlSourceByName), sd.rel.schema, sd.rel.name).Scan(&sd.id, &rel)
	var capCols []string
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err = tx.QueryRow(ctx, e.Cat.SQL(sqlInsertSource), sd.rel.schema, sd.rel.name, sd.KeyCols, sd.KeyTypes,
			sd.rel.kind == "p", sd.rel.oid).Scan(&sd.id, &sd.KeyCols, &sd.KeyTypes, &capCols)
		return capCols, err
	case err != nil:
		return nil, err
	case rel != nil && *rel == sd.rel.oid:
		err = tx.QueryRow(ctx, e.Cat.SQL(sqlSourceRow), sd.id).Scan(&sd.KeyCols, &sd.KeyTypes, &capCols)
		return capCols, err
	}
	name := sd.rel.schema + "." + sd.rel.name
	reason := fmt.Sprintf("table %s was dropped and created again: rows of the new table never reached the target", name)
	if err := e.Names.PauseReaders(ctx, tx, sd.id, name, reason); err != nil {
		return nil, err
	}
	err = tx.QueryRow(ctx, e.Cat.SQL(sqlRenewSource), sd.id, sd.rel.oid, sd.KeyCols, sd.KeyTypes, sd.rel.kind == "p").
		Scan(&sd.KeyCols, &sd.KeyTypes, &capCols)
	return capCols, err
}

// recordOps records the operators of the spec's key columns and ON
// conditions whose types compare with operators outside pg_catalog (an
// extension's type, as citext): the generated SQL names them (plan.Op).
func recordOps(ctx context.Context, tx pgx.Tx, sides []*side, spec *plan.Spec) error {
	colType := func(pos int, col string) string {
		if pos < len(sides) {
			return sides[pos].Columns[col]
		}
		return ""
	}
	ops, err := catalog.KeyOps(ctx, tx, spec.OpTypes(colType))
	if err != nil {
		return err
	}
	spec.SetOps(ops, colType)
	return nil
}

// recordTypes reads the target's column types into the spec.
func (e *Engine) recordTypes(ctx context.Context, tx pgx.Tx, tgt plan.Target, spec *plan.Spec) error {
	cols, err := pinnedPairs(ctx, tx, sqlTargetTypes, tgt.Quoted())
	if err != nil {
		return err
	}
	types := map[string]string{}
	for _, ct := range cols {
		types[ct[0]] = ct[1]
	}
	for i := range spec.Key {
		spec.Key[i].Type = types[spec.Key[i].Name]
	}
	for i := range spec.Columns {
		spec.Columns[i].Type = types[spec.Columns[i].Name]
	}
	return nil
}

// specSides loads the tables of a registered definition as define saw
// them, to tell which table a column reference of an ALTER reads.
func (e *Engine) specSides(ctx context.Context, tx pgx.Tx, spec plan.Spec) ([]*side, error) {
	var refs []grammar.TableRef
	for _, src := range spec.Sources() {
		refs = append(refs, grammar.TableRef{Table: grammar.Name{Schema: src.Schema, Name: src.Table}, Alias: src.Alias})
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

// tables are the sides as compilation sees them.
// loadSides loads the tables a statement (or a set operation's branch)
// reads, each a side of its own: its FROM table, the joined tables, then
// its subqueries'; two with one alias are refused.
func (e *Engine) loadSides(ctx context.Context, tx pgx.Tx, s *grammar.Transform) ([]*side, error) {
	refs := []grammar.TableRef{s.From}
	for _, j := range s.Joins {
		refs = append(refs, j.Table)
	}
	for _, sj := range s.SubJoins {
		refs = append(refs, sj.Table)
	}
	var sides []*side
	for _, ref := range refs {
		sd, err := e.loadSide(ctx, tx, ref)
		if err != nil {
			return nil, err
		}
		for _, o := range sides {
			if sd.Alias == o.Alias {
				return nil, errs.New(trellistype.CodeValidation, "the joined table needs an alias different from %s", o.Alias)
			}
		}
		sides = append(sides, sd)
	}
	return sides, nil
}

func tables(sides []*side) []*plan.Table {
	out := make([]*plan.Table, len(sides))
	for i, sd := range sides {
		out[i] = &sd.Table
	}
	return out
}
