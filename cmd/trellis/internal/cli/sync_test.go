package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
)

func TestSync(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, price int, tax int); INSERT INTO orders SELECT g, g, 1 FROM generate_series(1, 30) g`)
	e.ok("migrate")
	c := e.workers()
	v1 := e.writeFile("v1.sql", `TRANSFORM order_totals FROM orders SELECT price + tax AS total

TRANSFORM order_prices FROM orders SELECT price AS price
`)
	// A dry run prints the plan and changes nothing.
	r := e.ok("sync", "-f", v1, "--dry-run")
	require.Equal(t, []string{
		"+ create  order_totals",
		"    TRANSFORM order_totals FROM orders SELECT price + tax AS total",
		"+ create  order_prices",
		"    TRANSFORM order_prices FROM orders SELECT price AS price",
		"dry run: 2 changes planned, nothing changed",
	}, r.lines())
	require.Contains(t, e.ok("definitions").stdout, "no transforms")

	// Applied, waiting until live: progress goes to stderr, plain lines
	// when it is not a terminal.
	r = e.ok("sync", "-f", v1, "--wait")
	require.Equal(t, "2 changes applied", r.lines()[len(r.lines())-1])
	require.Contains(t, r.stderr, "order_totals: live\n")
	require.Contains(t, r.stderr, "order_prices: live\n")

	// The same file again: nothing to change.
	require.Equal(t, "nothing to change: the instance matches the file\n", e.ok("sync", "-f", v1).stdout)

	// An added column, another expression, and a prune.
	v2 := e.writeFile("v2.sql", `TRANSFORM order_totals FROM orders SELECT price + tax AS total, tax AS tax`)
	r = e.ok("sync", "-f", v2, "--prune", "--json", "--dry-run")
	var plan struct {
		Changes []struct {
			Action     string   `json:"action"`
			Target     string   `json:"target"`
			AddColumns []string `json:"add_columns"`
		} `json:"changes"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &plan), r.stdout)
	require.Len(t, plan.Changes, 2)
	require.Equal(t, "drop", plan.Changes[0].Action)
	require.Equal(t, "public.order_prices", plan.Changes[0].Target)
	require.Equal(t, "alter", plan.Changes[1].Action)
	require.Equal(t, []string{"tax"}, plan.Changes[1].AddColumns)
	r = e.ok("sync", "-f", v2, "--prune", "--wait")
	require.Equal(t, []string{"- drop    order_prices", "~ alter   order_totals (+tax)", "2 changes applied"}, r.lines())
	e.waitLive(c, "order_totals")

	v3 := e.writeFile("v3.sql", `TRANSFORM order_totals FROM orders SELECT price * tax AS total, tax AS tax`)
	r = e.ok("sync", "-f", v3)
	require.Equal(t, []string{"! rebuild order_totals: the expression of column total differs",
		"    TRANSFORM order_totals FROM orders SELECT price * tax AS total, tax AS tax", "1 change applied"}, r.lines())

	// A file that does not parse: the error says where, nothing changes.
	bad := e.writeFile("bad.sql", "TRANSFORM a FROM orders SELECT price AS p\n\nTRANSFORM b FROM orders SELECT FROM")
	r = e.run("sync", "-f", bad)
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "statement 2 of 2 (line 3)")
	require.Contains(t, r.stderr, "nothing was changed")
	require.NotContains(t, e.ok("definitions").stdout, "public.a")

	r = e.run("sync")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "sync needs -f FILE")
}

func TestApplyWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, price int); INSERT INTO orders SELECT g, g FROM generate_series(1, 30) g; ANALYZE orders`)
	e.ok("migrate")
	e.workers()
	r := e.ok("apply", "--wait", "TRANSFORM order_copy FROM orders SELECT price AS price")
	require.Equal(t, "defined public.order_copy\n", r.stdout)
	require.True(t, strings.HasSuffix(r.stderr, "order_copy: live\n"), r.stderr)
	require.NotContains(t, r.stderr, "\x1b", "not a terminal: plain lines")
}
