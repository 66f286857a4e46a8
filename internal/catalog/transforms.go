package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

// Querier is what catalog reads need: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Transform is one registered definition.
type Transform struct {
	ID           int
	Target       plan.Target
	Statement    string
	Spec         plan.Spec
	State        trellistype.State
	StateSince   time.Time
	PausedReason string
	BuildKind    string
	BuildCursor  []string
	BuildRows    int64
	CreatedAt    time.Time

	// A capture failure (FailureKind "" when none).
	FailureKind    trellistype.CaptureFailureKind
	FailureTable   string
	FailureError   string
	FailureColumns []string
	FailureAt      time.Time

	// A build that keeps failing (BuildAttempts 0 when none).
	BuildAttempts int
	BuildError    string
	BuildNextAt   time.Time
}

// Plan is the transform's SQL plan.
func (t *Transform) Plan() *plan.Plan { return &plan.Plan{Target: t.Target, Spec: t.Spec} }

// Catalog reads and writes one instance's catalog.
type Catalog struct {
	Schema string
	q      string // quoted schema
}

// New returns the catalog of the instance in schema.
func New(schema string) *Catalog { return &Catalog{Schema: schema, q: ident.Quote(schema)} }

// SQL expands a statement written in the project's one SQL convention:
// %[1]s is the quoted catalog schema, and parts (identifiers quoted
// through internal/ident, or SQL built from them; never values) fill %[2]s
// and on. A literal percent sign is %%. Every package's runtime SQL and the
// migrations are expanded here.
func (c *Catalog) SQL(format string, parts ...string) string {
	return fmt.Sprintf(format, append([]any{c.q}, anys(parts)...)...)
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Q is the quoted catalog schema.
func (c *Catalog) Q() string { return c.q }

func scanTransform(row pgx.Row) (*Transform, error) {
	var t Transform
	var spec []byte
	var reason, ftable, ferr *string
	var fkind *trellistype.CaptureFailureKind
	var fat, bnext *time.Time
	var berr *string
	err := row.Scan(&t.ID, &t.Target.Schema, &t.Target.Name, &t.Statement, &spec, &t.State, &t.StateSince,
		&reason, &t.BuildKind, &t.BuildCursor, &t.BuildRows, &t.CreatedAt,
		&fkind, &ftable, &ferr, &t.FailureColumns, &fat, &t.BuildAttempts, &berr, &bnext)
	if err != nil {
		return nil, err
	}
	t.BuildError = deref(berr)
	if bnext != nil {
		t.BuildNextAt = *bnext
	}
	if fkind != nil {
		t.FailureKind, t.FailureTable, t.FailureError = *fkind, deref(ftable), deref(ferr)
		if fat != nil {
			t.FailureAt = *fat
		}
	}
	if reason != nil {
		t.PausedReason = *reason
	}
	if err := json.Unmarshal(spec, &t.Spec); err != nil {
		return nil, fmt.Errorf("decoding the definition of %s: %w", t.Target, err)
	}
	return &t, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Transforms lists every definition, oldest first, and the catalog's
// generation (bumped by every change to the definitions).
func (c *Catalog) Transforms(ctx context.Context, q Querier) ([]*Transform, int64, error) {
	var gen int64
	if err := q.QueryRow(ctx, c.SQL(sqlGen)).Scan(&gen); err != nil {
		return nil, 0, fmt.Errorf("reading the catalog generation: %w", err)
	}
	rows, err := q.Query(ctx, c.SQL(sqlTransforms)+" ORDER BY t.created_at, t.id")
	if err != nil {
		return nil, 0, fmt.Errorf("reading the definitions: %w", err)
	}
	defer rows.Close()
	var out []*Transform
	for rows.Next() {
		t, err := scanTransform(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	rows.Close()
	for _, t := range out {
		if err := loaded(ctx, q, t); err != nil {
			return nil, 0, err
		}
	}
	return out, gen, nil
}

// loaded completes a definition read from the catalog: one stored before
// its key operators were recorded gets them derived (decision 0030).
func loaded(ctx context.Context, q Querier, t *Transform) error {
	if !t.Spec.OpsUnrecorded() {
		return nil
	}
	if err := deriveOps(ctx, q, &t.Spec); err != nil {
		return fmt.Errorf("deriving the key operators of %s: %w", t.Target, err)
	}
	return nil
}

// Transform reads one definition by target; nil when none.
func (c *Catalog) Transform(ctx context.Context, q Querier, target plan.Target, forUpdate bool) (*Transform, error) {
	sql := c.SQL(sqlTransforms) + " WHERE t.target_schema = $1 AND t.target_name = $2"
	if forUpdate {
		sql += " FOR UPDATE"
	}
	t, err := scanTransform(q.QueryRow(ctx, sql, target.Schema, target.Name))
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return t, loaded(ctx, q, t)
}

// TransformByID reads one definition by id, optionally locking its row; nil when none.
func (c *Catalog) TransformByID(ctx context.Context, q Querier, id int, forUpdate bool) (*Transform, error) {
	sql := c.SQL(sqlTransforms) + " WHERE t.id = $1"
	if forUpdate {
		sql += " FOR UPDATE"
	}
	t, err := scanTransform(q.QueryRow(ctx, sql, id))
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return t, loaded(ctx, q, t)
}

// BumpGen marks the definitions changed, so workers reload them.
func (c *Catalog) BumpGen(ctx context.Context, q Querier) error {
	_, err := q.Exec(ctx, c.SQL(sqlBumpGen))
	return err
}

// Source is a captured (or to be captured) source table: what capture,
// the drain and dumps know of it.
type Source struct {
	ID       int
	Schema   string
	Table    string
	KeyCols  []string
	KeyTypes []string
	// CapCols are the columns whose old values are recorded on updates and
	// deletes (GROUP BY and JOIN readers need them); CapTypes their types.
	CapCols  []string
	CapTypes []string
	// Partitioned sources are captured by row-level triggers, which
	// PostgreSQL clones onto every partition, present and future.
	Partitioned bool
	// Partitions are the leaf partitions of a partitioned source, which get
	// a TRUNCATE trigger each.
	Partitions   []string
	CaptureState string
}

// Name is schema.table.
func (s *Source) Name() string { return s.Schema + "." + s.Table }

// Sources lists every source table.
func (c *Catalog) Sources(ctx context.Context, q Querier) ([]*Source, error) {
	rows, err := q.Query(ctx, c.SQL(sqlSources))
	if err != nil {
		return nil, fmt.Errorf("reading the sources: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Source, error) {
		var s Source
		err := r.Scan(&s.ID, &s.Schema, &s.Table, &s.KeyCols, &s.KeyTypes, &s.CapCols, &s.CapTypes, &s.Partitioned, &s.Partitions, &s.CaptureState)
		return &s, err
	})
}
