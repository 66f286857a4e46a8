// Package trellisgoose defines and drops Trellis transforms in goose Go
// migrations (github.com/pressly/goose/v3), so a transform is created, and
// dropped, the way the tables it reads are:
//
//	func init() {
//		goose.AddMigrationNoTxContext(
//			trellisgoose.Up("TRANSFORM order_totals FROM orders SELECT price + tax AS total"),
//			trellisgoose.Down("order_totals"),
//		)
//	}
//
// Trellis never joins a migration's transaction (a statement commits on
// its own connections, and its target is built afterwards by the staging
// worker), so these are NoTx migrations: goose.AddMigrationNoTxContext, or
// goose.GoFunc{RunDB: ...} with goose.NewGoMigration, and Apply refuses a
// *sql.Tx. Each migration connects a Trellis client of its own, to the
// database goose runs on (read from the pgx driver's connection, or
// Migrations.Options.URL for another driver), migrates the catalog (safe
// every time), runs the statements in order and closes the client.
//
// A TRANSFORM is not idempotent, and these helpers do not make it so:
// goose's version table runs each migration once. For SQL-file migration
// tools (golang-migrate, Atlas, sqitch), run `trellis sync -f
// transforms.sql` after the schema migration instead.
package trellisgoose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/trellis-pg/trellis"
)

// Migrations configures the migrations it makes. The zero value connects
// to the database goose runs on, with Trellis's default catalog schema.
type Migrations struct {
	// Options are the Trellis client's. URL may be empty when goose runs on
	// the pgx driver (github.com/jackc/pgx/v5/stdlib): the connection's own
	// is used. Staging and DrainWorkers are ignored: a migration runs no
	// workers.
	Options trellis.Options
}

// Up returns a NoTx migration function that applies statements in order
// (any statement form of Trellis's grammar).
func Up(statements ...string) goose.GoMigrationNoTxContext { return Migrations{}.Up(statements...) }

// Down returns a NoTx migration function that pauses and drops the
// transforms writing targets, in order (list readers before what they
// read).
func Down(targets ...string) goose.GoMigrationNoTxContext { return Migrations{}.Down(targets...) }

// Up is the package-level Up with m's options.
func (m Migrations) Up(statements ...string) goose.GoMigrationNoTxContext {
	return func(ctx context.Context, db *sql.DB) error { return m.Apply(ctx, db, statements...) }
}

// Down is the package-level Down with m's options.
func (m Migrations) Down(targets ...string) goose.GoMigrationNoTxContext {
	var statements []string
	for _, t := range targets {
		statements = append(statements, "PAUSE TRANSFORM "+t, "DROP TRANSFORM "+t)
	}
	return m.Up(statements...)
}

// ErrInTransaction is returned when the statements are given a
// transaction: Trellis cannot take part in it.
var ErrInTransaction = errors.New("trellisgoose: Trellis statements cannot run inside a migration's transaction: register the migration with goose.AddMigrationNoTxContext (or a GoFunc with RunDB)")

// Apply connects a Trellis client to db's database (a *sql.DB or
// *sql.Conn; a *sql.Tx is refused with ErrInTransaction), migrates the
// catalog and applies statements in order. It stops at the first that fails,
// saying which; those before it stay applied.
func (m Migrations) Apply(ctx context.Context, db any, statements ...string) error {
	if _, ok := db.(*sql.Tx); ok {
		return ErrInTransaction
	}
	opts := m.Options
	opts.Staging, opts.DrainWorkers = false, 0
	if opts.URL == "" {
		var conn *sql.Conn
		var err error
		switch d := db.(type) {
		case *sql.DB:
			conn, err = d.Conn(ctx)
		case *sql.Conn:
			conn = d
		default:
			return fmt.Errorf("trellisgoose: cannot apply statements on a %T", db)
		}
		if err != nil {
			return fmt.Errorf("trellisgoose: %w", err)
		}
		if _, ok := db.(*sql.DB); ok {
			defer conn.Close()
		}
		if opts.URL, err = connString(conn); err != nil {
			return err
		}
	}
	c, err := trellis.Connect(ctx, opts)
	if err != nil {
		return fmt.Errorf("trellisgoose: %w", err)
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		return fmt.Errorf("trellisgoose: %w", err)
	}
	for i, s := range statements {
		if _, err := c.Apply(ctx, s); err != nil {
			return fmt.Errorf("trellisgoose: statement %d of %d (%s): %w", i+1, len(statements), firstLine(s), err)
		}
	}
	return nil
}

// connString reads the connection string of a pgx driver connection.
func connString(conn *sql.Conn) (string, error) {
	var url string
	err := conn.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("trellisgoose: goose runs on a %T connection, not pgx's: set Migrations.Options.URL", dc)
		}
		url = pc.Conn().Config().ConnString()
		return nil
	})
	if err == nil && url == "" {
		err = errors.New("trellisgoose: the pgx connection has no connection string: set Migrations.Options.URL")
	}
	return url, err
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	return s
}
