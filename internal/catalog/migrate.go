// Package catalog owns the instance's catalog schema: its versioned
// migrations, the advisory lock a fleet migrates under, and the checks that
// keep instances apart. It also reads the catalog's rows as Go values (a
// Transform with its plan.Spec, a Source) for the other packages, and
// checks that the source columns a definition reads are still as it read
// them.
package catalog

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/trellistype"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one version of the catalog.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in version order. They are
// checked to be contiguous from 1.
func Migrations() ([]Migration, error) {
	entries, err := migrationFiles.ReadDir("migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, rest, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration file %q has no version prefix", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration file %q: %w", name, err)
		}
		body, err := migrationFiles.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(rest, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations are not contiguous: expected version %d, found %d", i+1, m.Version)
		}
	}
	return out, nil
}

// LatestVersion is the catalog version this build of Trellis needs.
func LatestVersion() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Migrate creates or upgrades the catalog in schema, under an advisory lock
// so that a fleet booting at once migrates once. Each version runs in its own
// transaction together with its history row.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema, targetSchema string) error {
	if err := ValidateSchemas(schema, targetSchema); err != nil {
		return err
	}
	ms, err := Migrations()
	if err != nil {
		return errs.Wrap(trellistype.CodeInternal, err, "reading migrations")
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()

	unlock, err := locks.Migrate(ctx, conn, schema)
	if err != nil {
		return fmt.Errorf("waiting for the migration lock: %w", err)
	}
	defer unlock()

	if err := checkInstances(ctx, conn.Conn(), schema, targetSchema); err != nil {
		return err
	}
	current, err := currentVersion(ctx, conn.Conn(), schema)
	if err != nil {
		return err
	}
	if current > len(ms) {
		return errs.New(trellistype.CodeConflict, "catalog schema %q is at version %d, newer than this Trellis (%d): upgrade Trellis", schema, current, len(ms))
	}
	cat := New(schema)
	for _, m := range ms[current:] {
		err := pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, cat.SQL(m.SQL)); err != nil {
				return fmt.Errorf("applying catalog migration %d (%s): %w", m.Version, m.Name, err)
			}
			if m.Version == 1 {
				if _, err := tx.Exec(ctx, cat.SQL(sqlInsertInstance), schema, targetSchema); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, cat.SQL(sqlInsertHistory), m.Version, m.Name)
			return err
		})
		if err != nil {
			return err
		}
	}
	_, err = conn.Exec(ctx, cat.SQL(sqlUpdateInstanceTarget), targetSchema)
	return err
}

// ValidateSchemas checks the schema options on their own.
func ValidateSchemas(schema, targetSchema string) error {
	switch {
	case schema == "":
		return errs.New(trellistype.CodeValidation, "the catalog schema must not be empty")
	case targetSchema == "":
		return errs.New(trellistype.CodeValidation, "the target schema must not be empty")
	case schema == "public":
		return errs.New(trellistype.CodeValidation, `the catalog schema cannot be "public": choose a schema of Trellis's own, such as "trellis"`)
	case schema == targetSchema:
		return errs.New(trellistype.CodeValidation, "the catalog schema %q cannot also be the target schema", schema)
	case strings.HasPrefix(schema, "pg_") || schema == "information_schema":
		return errs.New(trellistype.CodeValidation, "the catalog schema %q is reserved by PostgreSQL", schema)
	}
	return nil
}

func currentVersion(ctx context.Context, conn *pgx.Conn, schema string) (int, error) {
	var exists, hasHistory bool
	var objects int
	err := conn.QueryRow(ctx, sqlSchemaState, schema).Scan(&exists, &hasHistory, &objects)
	if err != nil {
		return 0, fmt.Errorf("reading schema %q: %w", schema, err)
	}
	if !hasHistory {
		if exists && objects > 0 {
			return 0, errs.New(trellistype.CodeConflict, "schema %q already holds objects that are not Trellis's catalog: choose another catalog schema", schema)
		}
		if _, err := conn.Exec(ctx, New(schema).SQL(sqlCreateHistory)); err != nil {
			return 0, fmt.Errorf("creating the catalog history in %q: %w", schema, err)
		}
		return 0, nil
	}
	var v int
	if err := conn.QueryRow(ctx, New(schema).SQL(sqlMaxVersion)).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the catalog history in %q: %w", schema, err)
	}
	return v, nil
}

// Instance is another Trellis instance found in the database.
type Instance struct {
	CatalogSchema string
	TargetSchema  string
}

// Instances lists every Trellis instance in the database by its marker table.
func Instances(ctx context.Context, conn *pgx.Conn) ([]Instance, error) {
	rows, err := conn.Query(ctx, sqlFindMarkers)
	if err != nil {
		return nil, err
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []Instance
	for _, s := range schemas {
		var in Instance
		err := conn.QueryRow(ctx, New(s).SQL(sqlReadMarker)).Scan(&in.CatalogSchema, &in.TargetSchema)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the instance marker in %q: %w", s, err)
		}
		in.CatalogSchema = s
		out = append(out, in)
	}
	return out, nil
}

func checkInstances(ctx context.Context, conn *pgx.Conn, schema, targetSchema string) error {
	others, err := Instances(ctx, conn)
	if err != nil {
		return err
	}
	for _, o := range others {
		if o.CatalogSchema == schema {
			continue
		}
		if o.TargetSchema == schema {
			return errs.New(trellistype.CodeConflict, "schema %q is the target schema of the Trellis instance in %q: choose another catalog schema", schema, o.CatalogSchema)
		}
		if o.CatalogSchema == targetSchema {
			return errs.New(trellistype.CodeConflict, "schema %q is the catalog of another Trellis instance: choose another target schema", targetSchema)
		}
	}
	return nil
}

// ErrNotMigrated is the cause of Check's errors for a catalog that does
// not exist or is behind this build.
var ErrNotMigrated = errors.New("the Trellis catalog is not migrated")

// Check reports whether schema holds a catalog at the version this build
// needs: trellistype.CodeNotFound when it was never migrated, trellistype.CodeConflict when it is
// at another version.
func Check(ctx context.Context, conn *pgx.Conn, schema string) error {
	var exists, hasHistory bool
	var objects int
	if err := conn.QueryRow(ctx, sqlSchemaState, schema).Scan(&exists, &hasHistory, &objects); err != nil {
		return fmt.Errorf("reading schema %q: %w", schema, err)
	}
	if !hasHistory {
		return &errs.Error{Code: trellistype.CodeNotFound, Msg: fmt.Sprintf("the Trellis catalog in schema %q does not exist: run Migrate first", schema), Err: ErrNotMigrated}
	}
	var v int
	if err := conn.QueryRow(ctx, New(schema).SQL(sqlMaxVersion)).Scan(&v); err != nil {
		return err
	}
	want := LatestVersion()
	switch {
	case v == 0:
		return &errs.Error{Code: trellistype.CodeNotFound, Msg: fmt.Sprintf("the Trellis catalog in schema %q is not migrated: run Migrate first", schema), Err: ErrNotMigrated}
	case v < want:
		return &errs.Error{Code: trellistype.CodeNotFound, Msg: fmt.Sprintf("the Trellis catalog in schema %q is at version %d, this Trellis needs %d: run Migrate first", schema, v, want), Err: ErrNotMigrated}
	case v > want:
		return errs.New(trellistype.CodeConflict, "the Trellis catalog in schema %q is at version %d, newer than this Trellis (%d): upgrade Trellis", schema, v, want)
	}
	return nil
}
