package trellisgoose_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"testing/fstest"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/trellisgoose"
	"github.com/trellis-pg/trellis/trellistest"
)

func TestMain(m *testing.M) { os.Exit(trellistest.Main(m)) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A schema migration in SQL creates the table, a Go migration defines the
// transform over it; goose's own runner applies them, and rolls them back.
func TestGooseUpAndDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := trellistest.NewDatabase(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()

	schema := fstest.MapFS{"00001_orders.sql": {Data: []byte(`-- +goose Up
CREATE TABLE orders (id int PRIMARY KEY, price int, tax int);
INSERT INTO orders SELECT g, g, 1 FROM generate_series(1, 10) g;
-- +goose Down
DROP TABLE orders;
`)}}
	define := goose.NewGoMigration(2,
		&goose.GoFunc{RunDB: trellisgoose.Up(
			"TRANSFORM order_totals FROM orders SELECT price + tax AS total",
			"TRANSFORM big_orders FROM order_totals SELECT total AS total WHERE total > 5")},
		&goose.GoFunc{RunDB: trellisgoose.Down("big_orders", "order_totals")})
	p, err := goose.NewProvider(goose.DialectPostgres, db, schema, goose.WithGoMigrations(define))
	require.NoError(t, err)
	results, err := p.Up(ctx)
	require.NoError(t, err)
	require.Len(t, results, 2)

	// The application's worker builds the targets.
	c, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet(), Staging: true, DrainWorkers: 1})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, trellistest.AwaitLive(ctx, c, "big_orders", time.Minute))
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM big_orders`).Scan(&n))
	require.Equal(t, 6, n)

	// Down: the transforms are paused and dropped, readers first; then the table.
	_, err = p.DownTo(ctx, 0)
	require.NoError(t, err)
	defs, err := c.Definitions(ctx)
	require.NoError(t, err)
	require.Empty(t, defs)
	var exists bool
	require.NoError(t, db.QueryRowContext(ctx, `SELECT to_regclass('order_totals') IS NOT NULL OR to_regclass('orders') IS NOT NULL`).Scan(&exists))
	require.False(t, exists)

	// And up again.
	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.NoError(t, trellistest.AwaitLive(ctx, c, "big_orders", time.Minute))
}

// A failing statement fails the migration (goose records no version), and
// says which statement it was.
func TestGooseFailingStatement(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", trellistest.NewDatabase(t))
	require.NoError(t, err)
	defer db.Close()
	m := goose.NewGoMigration(1, &goose.GoFunc{RunDB: trellisgoose.Up("TRANSFORM t FROM no_such_table SELECT x AS x")}, nil)
	p, err := goose.NewProvider(goose.DialectPostgres, db, nil, goose.WithGoMigrations(m))
	require.NoError(t, err)
	_, err = p.Up(ctx)
	require.Error(t, err)
	require.Contains(t, err.Error(), "statement 1 of 1 (TRANSFORM t FROM no_such_table SELECT x AS x)")
	require.Equal(t, trellis.CodeNotFound, trellis.CodeOf(err))
	v, err := p.GetDBVersion(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
}

// Inside a migration's transaction, nothing is applied.
func TestGooseRefusesATransaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", trellistest.NewDatabase(t))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, `CREATE TABLE orders (id int PRIMARY KEY, price int)`)
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	err = trellisgoose.Migrations{}.Apply(ctx, tx, "TRANSFORM order_copy FROM orders SELECT price AS price")
	require.True(t, errors.Is(err, trellisgoose.ErrInTransaction), "error %v", err)
	require.NoError(t, tx.Rollback())
	var exists bool
	require.NoError(t, db.QueryRowContext(ctx, `SELECT to_regclass('order_copy') IS NOT NULL`).Scan(&exists))
	require.False(t, exists)
}
