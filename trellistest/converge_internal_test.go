package trellistest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// Converge keeps waiting past the limit of one call: here the limit is
// shortened, and the drain worker that lets the changes converge starts
// only once Converge has had a call time out.
func TestConvergeRetriesPastTheCallLimit(t *testing.T) {
	// Not parallel: it shortens callLimit and counts convergeAttempts.
	saved := callLimit
	callLimit = 200 * time.Millisecond
	t.Cleanup(func() { callLimit = saved })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := NewDatabase(t)
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer db.Close(ctx)
	_, err = db.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, price int); INSERT INTO orders VALUES (1, 10)`)
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Migrate(ctx))
	staging, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet, Staging: true})
	require.NoError(t, err)
	defer staging.Close()
	_, err = c.Define(ctx, "TRANSFORM order_copy FROM orders SELECT price AS price")
	require.NoError(t, err)
	require.NoError(t, AwaitLive(ctx, c, "order_copy", time.Minute))
	_, err = db.Exec(ctx, `UPDATE orders SET price = 11 WHERE id = 1`)
	require.NoError(t, err)

	before := convergeAttempts.Load()
	done := make(chan error, 1)
	go func() { done <- Converge(ctx, c, time.Minute) }()
	require.Eventually(t, func() bool { return convergeAttempts.Load() >= before+2 }, time.Minute, 10*time.Millisecond,
		"Converge did not call again after its first call timed out")
	select {
	case err := <-done:
		t.Fatalf("Converge returned before any drain worker ran: %v", err)
	default:
	}
	drain, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet, DrainWorkers: 1})
	require.NoError(t, err)
	defer drain.Close()
	require.NoError(t, <-done)
	var price int
	require.NoError(t, db.QueryRow(ctx, `SELECT price FROM order_copy WHERE id = 1`).Scan(&price))
	require.Equal(t, 11, price)
}
