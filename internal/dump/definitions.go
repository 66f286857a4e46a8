// Package dump carries an instance's definitions through a schema-only
// dump. A schema-only pg_dump of a database with Trellis holds the catalog's
// tables (empty), the target tables (empty) and the capture triggers, but
// not the catalog rows that say what is defined. Definitions returns those
// rows as SQL to append to the dump; Structure runs pg_dump and appends
// them, redoing the dump when a definition changed while it ran.
package dump

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ident"
)

// Snapshot is what a definitions dump holds: the catalog rows that say what
// is defined, as one repeatable-read read saw them.
type Snapshot struct {
	// Schema is the catalog schema.
	Schema     string
	History    []Migration
	Instance   Instance
	NSegs      int // the ledger's segments (its partitions are in the dump)
	Sources    []catalog.Source
	Transforms []Transform
	Links      []Link
	// SourcesSeq and TransformsSeq are the last ids their sequences gave;
	// nil when never used.
	SourcesSeq, TransformsSeq *int64
}

// Migration is a row of the catalog's migration history.
type Migration struct {
	Version   int
	Name      string
	AppliedAt time.Time
}

// Instance is the instance marker.
type Instance struct {
	CatalogSchema string
	TargetSchema  string
	CreatedAt     time.Time
}

// Transform is one definition. Spec is its JSON with no column paused.
type Transform struct {
	ID           int
	TargetSchema string
	TargetName   string
	Statement    string
	Spec         string
	CreatedAt    time.Time
}

// Link says a transform reads a source.
type Link struct {
	TransformID int
	SourceID    int
}

// Definitions reads the definitions of the instance in schema, in one
// repeatable-read snapshot, and returns them as SQL to append to a
// schema-only dump. A catalog that is missing or at another version than
// this build's is an error (CodeNotFound or CodeConflict).
func Definitions(ctx context.Context, pool *pgxpool.Pool, schema string) (string, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	if err := catalog.Check(ctx, conn.Conn(), schema); err != nil {
		return "", err
	}
	var s *Snapshot
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		s, err = Read(ctx, tx, schema)
		return err
	})
	if err != nil {
		return "", err
	}
	return s.SQL(), nil
}

// Read reads a Snapshot of the instance in schema through q (a transaction,
// for one consistent view).
func Read(ctx context.Context, q catalog.Querier, schema string) (*Snapshot, error) {
	s := &Snapshot{Schema: schema}
	sql := func(format string) string { return fmt.Sprintf(format, ident.Quote(schema)) }

	rows, err := q.Query(ctx, sql(sqlHistory))
	if err != nil {
		return nil, fmt.Errorf("reading the catalog's history: %w", err)
	}
	s.History, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Migration, error) {
		var m Migration
		err := r.Scan(&m.Version, &m.Name, &m.AppliedAt)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the catalog's history: %w", err)
	}
	if err := q.QueryRow(ctx, sql(sqlInstance)).Scan(&s.Instance.CatalogSchema, &s.Instance.TargetSchema, &s.Instance.CreatedAt); err != nil {
		return nil, fmt.Errorf("reading the instance marker: %w", err)
	}
	if err := q.QueryRow(ctx, sql(sqlRing)).Scan(&s.NSegs); err != nil {
		return nil, fmt.Errorf("reading the ring: %w", err)
	}
	rows, err = q.Query(ctx, sql(sqlSources))
	if err != nil {
		return nil, fmt.Errorf("reading the sources: %w", err)
	}
	s.Sources, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalog.Source, error) {
		var x catalog.Source
		err := r.Scan(&x.ID, &x.Schema, &x.Table, &x.KeyCols, &x.KeyTypes, &x.CapCols, &x.CapTypes, &x.Partitioned)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the sources: %w", err)
	}
	rows, err = q.Query(ctx, sql(sqlTransforms))
	if err != nil {
		return nil, fmt.Errorf("reading the definitions: %w", err)
	}
	s.Transforms, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Transform, error) {
		var t Transform
		err := r.Scan(&t.ID, &t.TargetSchema, &t.TargetName, &t.Statement, &t.Spec, &t.CreatedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the definitions: %w", err)
	}
	rows, err = q.Query(ctx, sql(sqlLinks))
	if err != nil {
		return nil, fmt.Errorf("reading the definitions' sources: %w", err)
	}
	s.Links, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Link, error) {
		var l Link
		err := r.Scan(&l.TransformID, &l.SourceID)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the definitions' sources: %w", err)
	}
	err = q.QueryRow(ctx, sqlSequences, ident.Qualified(schema, "sources"), ident.Qualified(schema, "transforms")).
		Scan(&s.SourcesSeq, &s.TransformsSeq)
	if err != nil {
		return nil, fmt.Errorf("reading the catalog's sequences: %w", err)
	}
	return s, nil
}

// SQL renders the snapshot as statements for psql (or any client that runs
// a script) to run after the dump's DDL. It is deterministic: the same
// definitions render the same text, so comparing two renderings tells
// whether a definition changed in between. Every identifier is quoted and
// every value is a literal that reads the same whatever
// standard_conforming_strings is; nothing depends on search_path. It does
// not open a transaction of its own, so a loader may run the whole dump in
// one (psql --single-transaction).
func (s *Snapshot) SQL() string {
	var b strings.Builder
	cat := ident.Quote(s.Schema)
	table := func(name string) string { return cat + "." + ident.Quote(name) }

	fmt.Fprintf(&b, `
--
-- Trellis: the definitions of the instance whose catalog schema is %s
-- (%d %s). Loaded after the schema above, every transform is defined and
-- not built (waiting_to_backfill), whatever its state where it was dumped:
-- the staging worker that starts on the loaded database reinstalls capture
-- and builds each target from its source.
--

`, oneLine(cat), len(s.Transforms), plural(len(s.Transforms), "transform", "transforms"))

	if len(s.History) > 0 {
		fmt.Fprintf(&b, "INSERT INTO %s (version, name, applied_at) VALUES\n", table("schema_migrations"))
		for i, m := range s.History {
			fmt.Fprintf(&b, "    (%d, %s, %s)%s\n", m.Version, literal(m.Name), timestamp(m.AppliedAt), sep(i, len(s.History)))
		}
	}
	fmt.Fprintf(&b, "INSERT INTO %s (catalog_schema, target_schema, created_at) VALUES (%s, %s, %s);\n",
		table("trellis_instance"), literal(s.Instance.CatalogSchema), literal(s.Instance.TargetSchema), timestamp(s.Instance.CreatedAt))
	// The rows the catalog's migration seeds: the ledger's ring (its
	// segments are the dump's ledger partitions) and the first cut.
	fmt.Fprintf(&b, "INSERT INTO %s (cur, nsegs) VALUES (0, %d);\n", table("ring"), s.NSegs)
	fmt.Fprintf(&b, "INSERT INTO %s (snap) VALUES (pg_catalog.pg_current_snapshot());\n", table("cuts"))

	if len(s.Sources) > 0 {
		fmt.Fprintf(&b, "INSERT INTO %s (id, schema_name, table_name, key_columns, key_types, cap_columns, cap_types, partitioned) VALUES\n", table("sources"))
		for i, x := range s.Sources {
			fmt.Fprintf(&b, "    (%d, %s, %s, %s, %s, %s, %s, %t)%s\n", x.ID, literal(x.Schema), literal(x.Table),
				textArray(x.KeyCols), textArray(x.KeyTypes), textArray(x.CapCols), textArray(x.CapTypes), x.Partitioned, sep(i, len(s.Sources)))
		}
	}
	if len(s.Transforms) > 0 {
		fmt.Fprintf(&b, "INSERT INTO %s (id, target_schema, target_name, statement, spec, created_at) VALUES\n", table("transforms"))
		for i, t := range s.Transforms {
			fmt.Fprintf(&b, "    (%d, %s, %s, %s, %s::jsonb, %s)%s\n", t.ID, literal(t.TargetSchema), literal(t.TargetName),
				literal(t.Statement), literal(t.Spec), timestamp(t.CreatedAt), sep(i, len(s.Transforms)))
		}
	}
	if len(s.Links) > 0 {
		fmt.Fprintf(&b, "INSERT INTO %s (transform_id, source_id) VALUES\n", table("transform_sources"))
		for i, l := range s.Links {
			fmt.Fprintf(&b, "    (%d, %d)%s\n", l.TransformID, l.SourceID, sep(i, len(s.Links)))
		}
	}
	var seqs []string
	for _, q := range []struct {
		table string
		last  *int64
	}{{"sources", s.SourcesSeq}, {"transforms", s.TransformsSeq}} {
		if q.last != nil {
			seqs = append(seqs, fmt.Sprintf("pg_catalog.setval(pg_catalog.pg_get_serial_sequence(%s, 'id'), %d)",
				literal(table(q.table)), *q.last))
		}
	}
	if len(seqs) > 0 {
		fmt.Fprintf(&b, "SELECT %s;\n", strings.Join(seqs, ", "))
	}
	return b.String()
}

// oneLine keeps a name in a comment on its line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

func sep(i, n int) string {
	if i == n-1 {
		return ";"
	}
	return ","
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// literal is s as a string literal that means s whether or not
// standard_conforming_strings is on: an escape string when s holds a
// backslash.
func literal(s string) string {
	if !strings.Contains(s, `\`) {
		return ident.Literal(s)
	}
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}

// textArray is a text[] of literals.
func textArray(vals []string) string {
	if len(vals) == 0 {
		return "'{}'::text[]"
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = literal(v)
	}
	return "ARRAY[" + strings.Join(parts, ", ") + "]::text[]"
}

// timestamp is t as a timestamptz literal, to the microsecond.
func timestamp(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "+00'::timestamptz"
}
