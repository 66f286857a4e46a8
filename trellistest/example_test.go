package trellistest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/trellistest"
)

// exampleT stands in for the *testing.T of a test, so that the examples
// run as they are shown. In a suite, pass the test's own t.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()                        {}
func (t *exampleT) Name() string                   { return "Example" }
func (t *exampleT) Cleanup(f func())               { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (t *exampleT) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

// end runs the cleanups, as the end of a test does.
func (t *exampleT) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// A test gets its own empty database; it is dropped when the test ends.
func ExampleNewDatabase() {
	t := &exampleT{}
	defer t.end()
	ctx := context.Background()

	url := trellistest.NewDatabase(t)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		panic(err)
	}
	defer db.Close(ctx)
	var tables int
	_ = db.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables)
	fmt.Println("tables:", tables)
	// Output:
	// tables: 0
}

// connectForExample is what a suite's setup does: a database with a table,
// the catalog migrated, and a client running the workers.
func connectForExample(t testing.TB) (*trellis.Client, *pgx.Conn) {
	ctx := context.Background()
	url := trellistest.NewDatabase(t)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		panic(err)
	}
	t.Cleanup(func() { _ = db.Close(ctx) })
	if _, err := db.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, price int, tax int);
		INSERT INTO orders VALUES (1, 10, 1), (2, 20, 2)`); err != nil {
		panic(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet})
	if err != nil {
		panic(err)
	}
	if err := m.Migrate(ctx); err != nil {
		panic(err)
	}
	_ = m.Close()
	c, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet, Staging: true, DrainWorkers: 1})
	if err != nil {
		panic(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, db
}

// A test defines a transform and waits until its target is built.
func ExampleAwaitLive() {
	t := &exampleT{}
	defer t.end()
	ctx := context.Background()
	c, db := connectForExample(t)

	if _, err := c.Define(ctx, "TRANSFORM order_totals FROM orders SELECT price + tax AS total"); err != nil {
		panic(err)
	}
	if err := trellistest.AwaitLive(ctx, c, "order_totals", 30*time.Second); err != nil {
		panic(err)
	}
	var rows int
	_ = db.QueryRow(ctx, `SELECT count(*) FROM order_totals`).Scan(&rows)
	fmt.Println("rows:", rows)

	// A target no transform writes fails at once.
	err := trellistest.AwaitLive(ctx, c, "order_totalz", 30*time.Second)
	fmt.Println(err)
	// Output:
	// rows: 2
	// trellis: no transform writes order_totalz
}

// A test writes to a source and waits until the write has reached the
// target before it asserts.
func ExampleConverge() {
	t := &exampleT{}
	defer t.end()
	ctx := context.Background()
	c, db := connectForExample(t)
	if _, err := c.Define(ctx, "TRANSFORM order_totals FROM orders SELECT price + tax AS total"); err != nil {
		panic(err)
	}
	if err := trellistest.AwaitLive(ctx, c, "order_totals", 30*time.Second); err != nil {
		panic(err)
	}

	if _, err := db.Exec(ctx, `UPDATE orders SET price = 100 WHERE id = 1`); err != nil {
		panic(err)
	}
	if err := trellistest.Converge(ctx, c, 30*time.Second); err != nil {
		panic(err)
	}
	var total int
	_ = db.QueryRow(ctx, `SELECT total FROM order_totals WHERE id = 1`).Scan(&total)
	fmt.Println("total:", total)
	// Output:
	// total: 101
}
