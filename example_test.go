package trellis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/testpg"
)

// exampleDatabase starts a throwaway PostgreSQL for an example and returns
// a database URL and the function that removes it all.
func exampleDatabase() (string, func()) {
	ctx := context.Background()
	cluster, err := testpg.Start(ctx, testpg.Options{})
	if err != nil {
		panic(err)
	}
	url, err := cluster.CreateDatabase(ctx, "example")
	if err != nil {
		panic(err)
	}
	return url, func() { _ = cluster.Stop() }
}

// A service defines a transform, writes to its source, and reads its own
// write from the target.
func Example() {
	url, cleanup := exampleDatabase()
	defer cleanup()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The application's own table.
	db, _ := pgx.Connect(ctx, url)
	defer db.Close(ctx)
	_, _ = db.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)
	_, _ = db.Exec(ctx, `INSERT INTO orders VALUES (1, 10, 1), (2, 20, 2)`)

	// A deploy's migration step.
	migrator, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet})
	if err != nil {
		panic(err)
	}
	if err := migrator.Migrate(ctx); err != nil {
		panic(err)
	}
	migrator.Close()

	// The worker process: staging and drain workers.
	client, err := trellis.Connect(ctx, trellis.Options{URL: url, Staging: true, DrainWorkers: 2, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	target, err := client.Define(ctx, "TRANSFORM order_totals FROM orders SELECT price + tax AS total")
	if err != nil {
		panic(err)
	}
	fmt.Println("defined", target)
	for {
		st, err := client.Status(ctx, "order_totals")
		if err != nil {
			panic(err)
		}
		if st.State == trellis.StateLive {
			fmt.Println("state", st.State)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Read your own write.
	_, _ = db.Exec(ctx, `UPDATE orders SET price = 100 WHERE id = 1`)
	token, _ := client.WatermarkToken(ctx)
	if err := client.AwaitConverged(ctx, token, 10*time.Second); err != nil {
		panic(err)
	}
	var total string
	_ = db.QueryRow(ctx, `SELECT total::text FROM order_totals WHERE id = 1`).Scan(&total)
	fmt.Println("total of order 1:", total)

	// Statements report what they did.
	applied, err := client.Apply(ctx, "PAUSE TRANSFORM order_totals")
	if err != nil {
		panic(err)
	}
	switch a := applied.(type) {
	case trellis.Paused:
		fmt.Println("paused", a.Addresses)
	}
	// Output:
	// defined public.order_totals
	// state live
	// total of order 1: 101
	// paused [order_totals]
}
