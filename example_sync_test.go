package trellis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis"
)

// A deploy makes the instance's transforms match a file: the first sync
// creates them, the same file again changes nothing, and an added column
// is an alter.
func ExampleClient_Sync() {
	url, cleanup := exampleDatabase()
	defer cleanup()
	ctx := context.Background()
	db, _ := pgx.Connect(ctx, url)
	defer db.Close(ctx)
	_, _ = db.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, tax numeric)`)

	client, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	if err := client.Migrate(ctx); err != nil {
		panic(err)
	}

	file := `TRANSFORM order_totals FROM orders SELECT price + tax AS total

TRANSFORM order_prices FROM orders SELECT price AS price`
	show := func(p trellis.SyncPlan) {
		if len(p.Changes) == 0 {
			fmt.Println("no changes")
		}
		for _, c := range p.Changes {
			fmt.Println(c.Action, c.Target, c.AddColumns, c.DropColumns)
		}
	}
	plan, err := client.Sync(ctx, file, trellis.SyncOptions{})
	if err != nil {
		panic(err)
	}
	show(plan)

	plan, _ = client.Sync(ctx, file, trellis.SyncOptions{})
	show(plan)

	file = `TRANSFORM order_totals FROM orders SELECT price + tax AS total, tax AS tax`
	plan, _ = client.Sync(ctx, file, trellis.SyncOptions{DryRun: true, Prune: true})
	show(plan)
	// Output:
	// create public.order_totals [] []
	// create public.order_prices [] []
	// no changes
	// drop public.order_prices [] []
	// alter public.order_totals [tax] []
}
