package trellistest_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/trellistest"
)

// userSetup is what a user's suite does: a database from NewDatabase, a
// table, the catalog migrated, and a client with opts.
func userSetup(t *testing.T, opts trellis.Options) (*trellis.Client, *pgx.Conn, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	url := trellistest.NewDatabase(t)
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	_, err = db.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, price int)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO orders SELECT g, g FROM generate_series(1, 20) g`)
	require.NoError(t, err)
	opts.URL = url
	opts.Logger = quietLogger()
	m, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: opts.Logger})
	require.NoError(t, err)
	require.NoError(t, m.Migrate(ctx))
	require.NoError(t, m.Close())
	c, err := trellis.Connect(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, db, ctx
}

func quietLogger() *slog.Logger {
	if os.Getenv("TRELLIS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func TestNewDatabaseIsFreshAndDropped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	names := map[string]bool{}
	var adminURL string
	t.Run("group", func(t *testing.T) {
		for _, name := range []string{"a", "b", "c"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				url := trellistest.NewDatabase(t)
				db, err := pgx.Connect(ctx, url)
				require.NoError(t, err)
				defer db.Close(ctx)
				var dbname string
				var tables int
				require.NoError(t, db.QueryRow(ctx, `SELECT current_database(),
					(SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema'))`).Scan(&dbname, &tables))
				require.Zero(t, tables, "a fresh database has no tables")
				// Each test's database is its own: a table here is not seen by the others.
				_, err = db.Exec(ctx, `CREATE TABLE mine (id int PRIMARY KEY)`)
				require.NoError(t, err)
				mu.Lock()
				require.False(t, names[dbname], "database %s handed out twice", dbname)
				names[dbname] = true
				adminURL = url
				mu.Unlock()
			})
		}
	})
	require.Len(t, names, 3)
	// Once the tests ended, their databases are gone.
	cfg, err := pgx.ParseConfig(adminURL)
	require.NoError(t, err)
	cfg.Database = "postgres"
	db, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer db.Close(ctx)
	for name := range names {
		var exists bool
		require.NoError(t, db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists))
		require.False(t, exists, "database %s was not dropped", name)
	}
}

func TestAwaitLiveUnknownTargetFailsAtOnce(t *testing.T) {
	t.Parallel()
	c, _, ctx := userSetup(t, trellis.Options{})
	begin := time.Now()
	err := trellistest.AwaitLive(ctx, c, "no_such_target", time.Minute)
	require.Equal(t, trellis.CodeNotFound, trellis.CodeOf(err), "error %v", err)
	require.Contains(t, err.Error(), "no transform writes no_such_target")
	require.Less(t, time.Since(begin), 30*time.Second)
}

func TestAwaitLiveTimeoutNamesStateAndReason(t *testing.T) {
	t.Parallel()
	// No staging worker: nothing builds the target.
	c, _, ctx := userSetup(t, trellis.Options{})
	_, err := c.Define(ctx, "TRANSFORM order_copy FROM orders SELECT price AS price")
	require.NoError(t, err)
	err = trellistest.AwaitLive(ctx, c, "order_copy", 300*time.Millisecond)
	require.Equal(t, trellis.CodeTimeout, trellis.CodeOf(err), "error %v", err)
	require.Contains(t, err.Error(), "public.order_copy was not live within 300ms: it is waiting_to_backfill")
	require.Contains(t, err.Error(), "no staging worker is running")

	// An operator's pause: the state and its reason.
	_, err = c.Apply(ctx, "PAUSE TRANSFORM order_copy")
	require.NoError(t, err)
	st, err := c.Status(ctx, "order_copy")
	require.NoError(t, err)
	require.NotEmpty(t, st.PausedReason)
	err = trellistest.AwaitLive(ctx, c, "order_copy", 200*time.Millisecond)
	require.Equal(t, trellis.CodeTimeout, trellis.CodeOf(err), "error %v", err)
	require.Contains(t, err.Error(), "it is paused ("+st.PausedReason)

	// The caller's context ends the wait too.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = trellistest.AwaitLive(short, c, "order_copy", time.Minute)
	require.Equal(t, trellis.CodeTimeout, trellis.CodeOf(err), "error %v", err)
}

func TestAwaitLiveAndConverge(t *testing.T) {
	t.Parallel()
	c, db, ctx := userSetup(t, trellis.Options{Staging: true, DrainWorkers: 1})
	_, err := c.Define(ctx, "TRANSFORM order_doubled FROM orders SELECT price * 2 AS doubled")
	require.NoError(t, err)
	require.NoError(t, trellistest.AwaitLive(ctx, c, "order_doubled", time.Minute))
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM order_doubled`).Scan(&n))
	require.Equal(t, 20, n)

	_, err = db.Exec(ctx, `UPDATE orders SET price = 1000 WHERE id = 7; DELETE FROM orders WHERE id = 8; INSERT INTO orders VALUES (21, 5)`)
	require.NoError(t, err)
	require.NoError(t, trellistest.Converge(ctx, c, time.Minute))
	var doubled int
	require.NoError(t, db.QueryRow(ctx, `SELECT doubled FROM order_doubled WHERE id = 7`).Scan(&doubled))
	require.Equal(t, 2000, doubled)
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM order_doubled WHERE id IN (8, 21)`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestConvergeWithoutDrainWorkersTimesOut(t *testing.T) {
	t.Parallel()
	c, db, ctx := userSetup(t, trellis.Options{Staging: true})
	_, err := c.Define(ctx, "TRANSFORM order_copy FROM orders SELECT price AS price")
	require.NoError(t, err)
	require.NoError(t, trellistest.AwaitLive(ctx, c, "order_copy", time.Minute))
	_, err = db.Exec(ctx, `UPDATE orders SET price = 0 WHERE id = 1`)
	require.NoError(t, err)
	err = trellistest.Converge(ctx, c, 300*time.Millisecond)
	require.Equal(t, trellis.CodeTimeout, trellis.CodeOf(err), "error %v", err)
	require.Contains(t, err.Error(), "no drain worker is running")
}
