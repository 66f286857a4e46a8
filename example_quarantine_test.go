package trellis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis"
)

// A row on which a column's expression fails quarantines that column only;
// once the row is fixed, RESUME re-derives the column.
func Example_quarantineAndResume() {
	url, cleanup := exampleDatabase()
	defer cleanup()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, _ := pgx.Connect(ctx, url)
	defer db.Close(ctx)
	_, _ = db.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, price int, qty int)`)
	_, _ = db.Exec(ctx, `INSERT INTO items VALUES (1, 10, 2), (2, 30, 3)`)
	m, _ := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet})
	if err := m.Migrate(ctx); err != nil {
		panic(err)
	}
	m.Close()
	client, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet, Staging: true, DrainWorkers: 1})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	if _, err := client.Define(ctx, "TRANSFORM unit_prices FROM items SELECT price AS price, price / qty AS unit"); err != nil {
		panic(err)
	}
	waitFor := func(ok func() bool) {
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				panic("timed out")
			}
		}
	}
	waitFor(func() bool {
		st, _ := client.Status(ctx, "unit_prices")
		return st != nil && st.State == trellis.StateLive
	})

	// A bad row: qty 0 divides by zero.
	_, _ = db.Exec(ctx, `INSERT INTO items VALUES (3, 50, 0)`)
	var q trellis.QuarantineEntry
	waitFor(func() bool {
		q, _ = client.QuarantineStatus(ctx, "unit_prices.unit")
		return q.State == trellis.StatePaused
	})
	fmt.Println(q.Target, q.State, q.Error)
	token, _ := client.WatermarkToken(ctx)
	_ = client.AwaitConverged(ctx, token, 10*time.Second)
	var price int
	_ = db.QueryRow(ctx, `SELECT price FROM unit_prices WHERE id = 3`).Scan(&price)
	fmt.Println("the other column still flows: price", price)

	// Fix the row, then resume the column.
	_, _ = db.Exec(ctx, `UPDATE items SET qty = 5 WHERE id = 3`)
	applied, err := client.Apply(ctx, "RESUME TRANSFORM unit_prices.unit")
	if err != nil {
		panic(err)
	}
	fmt.Println("resumed", applied.(trellis.Resumed).Addresses)
	waitFor(func() bool {
		var unit *int
		_ = db.QueryRow(ctx, `SELECT unit FROM unit_prices WHERE id = 3`).Scan(&unit)
		q, _ = client.QuarantineStatus(ctx, "unit_prices.unit")
		return unit != nil && *unit == 10 && q.State == trellis.StateLive
	})
	fmt.Println("unit of item 3 is 10 again;", q.Target, q.State)
	// Output:
	// unit_prices.unit paused division by zero
	// the other column still flows: price 50
	// resumed [unit_prices.unit]
	// unit of item 3 is 10 again; unit_prices.unit live
}
