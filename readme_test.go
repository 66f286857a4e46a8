package trellis_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// docsSetup creates the tables and view the examples of README.md and
// docs/shapes.md read.
var docsSetup = []string{
	`CREATE TABLE customers (id int PRIMARY KEY, name text, region text, region_id int, active bool)`,
	`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, product_id int, price numeric, qty int, status text, region text, placed_at timestamptz)`,
	`CREATE TABLE products (id int PRIMARY KEY, title text, price numeric)`,
	`CREATE TABLE order_items (id bigint PRIMARY KEY, order_id bigint, product_id int, qty int)`,
	`CREATE TABLE notes (order_id bigint, line int, note text, PRIMARY KEY (order_id, line))`,
	`CREATE TABLE regions (id int PRIMARY KEY, name text)`,
	`CREATE TABLE sales (id bigint PRIMARY KEY, amount numeric, region text)`,
	`CREATE TABLE refunds (id bigint PRIMARY KEY, amount numeric, region text, order_id bigint)`,
	`CREATE TABLE vip (customer_id int PRIMARY KEY)`,
	`CREATE TABLE closed (region text PRIMARY KEY)`,
	`CREATE VIEW paid_orders AS SELECT id, customer_id, price FROM orders WHERE status = 'paid'`,
}

// readmeShapes are the shapes README.md's table must show one example of:
// every shape issue 11 names.
var readmeShapes = []string{
	"projection", "join", "left join", "right join", "full join", "star join", "chain join", "comma join", "`USING`",
	"EXISTS / IN", "NOT EXISTS / NOT IN", "GROUP BY", "`HAVING`", "`DISTINCT`", "no GROUP BY", "window", "top-k",
	"top-k per group", "`DISTINCT ON`", "`UNION ALL`", "`UNION` / `INTERSECT` / `EXCEPT`", "aggregate over `UNION ALL`", "derived table", "CTE", "view",
}

// docsExamples returns README.md's table of shapes (shape name to example)
// and the examples of docs/shapes.md by indented block (lines that start
// with TRANSFORM; a line indented further continues the statement): a
// block's later statements may read its earlier ones' targets.
func docsExamples(t *testing.T) (readme map[string]string, shapes [][]string) {
	t.Helper()
	raw, err := os.ReadFile("README.md")
	require.NoError(t, err)
	readme = map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| ([^|]+) \\| `(TRANSFORM [^`]+)` \\|").FindAllStringSubmatch(string(raw), -1) {
		readme[m[1]] = m[2]
	}
	raw, err = os.ReadFile("docs/shapes.md")
	require.NoError(t, err)
	var block []string
	cur := ""
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "    TRANSFORM "):
			if cur != "" {
				block = append(block, cur)
			}
			cur = strings.TrimSpace(line)
		case cur != "" && strings.HasPrefix(line, "      "):
			cur += " " + strings.TrimSpace(line)
		default:
			if cur != "" {
				block = append(block, cur)
			}
			cur = ""
			if block != nil {
				shapes = append(shapes, block)
			}
			block = nil
		}
	}
	if cur != "" {
		block = append(block, cur)
	}
	if block != nil {
		shapes = append(shapes, block)
	}
	return readme, shapes
}

// Every example of README.md's grammar section and of docs/shapes.md is
// accepted by Define as written, and README.md's table shows an example of
// every shape.
func TestDocsExamplesAreAccepted(t *testing.T) {
	t.Parallel()
	readme, shapes := docsExamples(t)
	for _, shape := range readmeShapes {
		require.NotEmpty(t, readme[shape], "README.md's table of shapes has no example of %s", shape)
	}
	require.NotEmpty(t, shapes, "docs/shapes.md has no example")
	e := setup(t)
	for _, q := range docsSetup {
		e.exec(q)
	}
	e.exec(`CREATE SCHEMA docs`)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	// Targets go to a schema of their own: an example's target may share a
	// table's name (TRANSFORM regions ...). Each is dropped after its
	// check, since examples share target names.
	c := e.connect(trellis.Options{TargetSchema: "docs"})
	// check defines a block's statements in order (one reading another's
	// target is a chain), then drops their targets, the last first.
	check := func(where string, block []string) {
		t.Helper()
		var targets []string
		defer func() {
			for i := len(targets) - 1; i >= 0; i-- {
				_, err := c.Apply(e.ctx, "DROP TRANSFORM "+targets[i])
				require.NoError(t, err, "%s: %s", where, targets[i])
			}
		}()
		for _, stmt := range block {
			// Examples of one block may share a target name: the
			// earlier one is dropped first.
			name := "docs." + strings.Fields(stmt)[1]
			for i, held := range targets {
				if held == name {
					_, err := c.Apply(e.ctx, "DROP TRANSFORM "+held)
					require.NoError(t, err, "%s: %s", where, held)
					targets = append(targets[:i], targets[i+1:]...)
					break
				}
			}
			target, err := c.Define(e.ctx, stmt)
			if err != nil {
				t.Errorf("%s: %s: %v", where, stmt, err)
				return
			}
			targets = append(targets, target)
			require.True(t, strings.HasPrefix(target, "docs."), target)
			cols := e.rows(`SELECT count(*) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, target)
			require.NotEqual(t, "0", cols[0][0], "%s: %s", where, stmt)
		}
	}
	for shape, stmt := range readme {
		check("README.md, "+shape, []string{stmt})
	}
	for _, block := range shapes {
		check("docs/shapes.md", block)
	}
}
