package trellistest_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// userSuite is a test file of an application that uses Trellis: two
// parallel tests, each on its own database.
const userSuite = `package orders_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/trellistest"
)

func setup(t *testing.T) (*trellis.Client, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url := trellistest.NewDatabase(t)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(ctx) })
	if _, err := db.Exec(ctx, "CREATE TABLE orders (id int PRIMARY KEY, price int); INSERT INTO orders VALUES (1, 10)"); err != nil {
		t.Fatal(err)
	}
	m, err := trellis.Connect(ctx, trellis.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	m.Close()
	c, err := trellis.Connect(ctx, trellis.Options{URL: url, Staging: true, DrainWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, db
}

func testOrders(t *testing.T, price int) {
	t.Parallel()
	ctx := context.Background()
	c, db := setup(t)
	if _, err := c.Define(ctx, "TRANSFORM order_copy FROM orders SELECT price AS price"); err != nil {
		t.Fatal(err)
	}
	if err := trellistest.AwaitLive(ctx, c, "order_copy", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "UPDATE orders SET price = $1 WHERE id = 1", price); err != nil {
		t.Fatal(err)
	}
	if err := trellistest.Converge(ctx, c, time.Minute); err != nil {
		t.Fatal(err)
	}
	var got int
	if err := db.QueryRow(ctx, "SELECT price FROM order_copy WHERE id = 1").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != price {
		t.Fatalf("order_copy has price %d, want %d", got, price)
	}
}

func TestOrdersA(t *testing.T) { testOrders(t, 11) }
func TestOrdersB(t *testing.T) { testOrders(t, 12) }
`

// A user's suite, in a module of its own that requires Trellis (here
// replaced by this checkout), runs with go test and nothing else: no
// TestMain, no server set up beforehand. It must build offline, from the
// module cache CI already filled.
func TestUserModuleSuite(t *testing.T) {
	t.Parallel()
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	goVersion := goDirective(t, filepath.Join(repo, "go.mod"))
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write("go.mod", "module example.com/shop\n\ngo "+goVersion+"\n\n"+
		"require github.com/trellis-pg/trellis v0.0.0\n\n"+
		"replace github.com/trellis-pg/trellis => "+repo+"\n")
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	require.NoError(t, err)
	write("go.sum", string(sum))
	write("orders_test.go", userSuite)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", // go test puts its own toolchain first on PATH
		"test", "-count=1", "-v", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go test in the user's module:\n%s", out)
	require.Contains(t, string(out), "--- PASS: TestOrdersA")
	require.Contains(t, string(out), "--- PASS: TestOrdersB")
	require.Contains(t, string(out), "ok  \texample.com/shop")
}

// goDirective reads the go line of a go.mod.
func goDirective(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no go directive in %s", path)
	return ""
}
