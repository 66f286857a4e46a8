package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) {
	warmParser()
	os.Exit(testsupport.Main(m))
}

// warmParser pays the parser's start-up before the tests run. Its first
// call in a process compiles PostgreSQL's parser (WebAssembly), about 2s per
// parser instance normally but over 10s under the race detector; that time
// counts against the deadline of the Apply call that happens to make it, so
// parallel tests under -race would otherwise time out. Two parses at once
// make the pool compile the instances parallel calls use.
func warmParser() {
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { _, _ = grammar.Parse("PAUSE TRANSFORM t") })
	}
	wg.Wait()
}

// env is one test's database and helpers to run commands on it.
type env struct {
	t   *testing.T
	url string
	db  *pgxpool.Pool
	ctx context.Context
}

func setup(t *testing.T) *env {
	t.Helper()
	url := testsupport.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	db, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return &env{t: t, url: url, db: db, ctx: ctx}
}

// result is what one command run printed and returned.
type result struct {
	stdout, stderr string
	code           int
}

// lines are stdout's lines.
func (r result) lines() []string {
	return strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
}

// runIn runs a command line in-process with stdin, DATABASE_URL unset.
func runIn(ctx context.Context, stdin string, args ...string) result {
	var out, errOut bytes.Buffer
	code := cli.Run(ctx, args, cli.Env{
		Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(stdin),
		Getenv: func(string) string { return "" },
	})
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// run runs a trellis command against the test's database.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return runIn(e.ctx, "", append(args, "--url", e.url)...)
}

// ok runs a command and requires it to succeed.
func (e *env) ok(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	require.Equal(e.t, cli.ExitOK, r.code, "trellis %s: stderr %s", strings.Join(args, " "), r.stderr)
	return r
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := e.db.Exec(e.ctx, sql, args...)
	require.NoError(e.t, err, sql)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// workers connects a client running the staging worker and a drain worker,
// as a service of the fleet would.
func (e *env) workers() *trellis.Client {
	e.t.Helper()
	c, err := trellis.Connect(e.ctx, trellis.Options{URL: e.url, Staging: true, DrainWorkers: 1,
		Logger: quietLogger(), PollInterval: 20 * time.Millisecond})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *env) waitLive(c *trellis.Client, target string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		st, err := c.Status(e.ctx, target)
		return err == nil && st != nil && st.State == trellis.StateLive
	}, time.Minute, 10*time.Millisecond, "%s did not go live", target)
}

func (e *env) writeFile(name, text string) string {
	e.t.Helper()
	p := filepath.Join(e.t.TempDir(), name)
	require.NoError(e.t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	e := setup(t)

	// The root command itself, with its output injected.
	var out bytes.Buffer
	root := cli.NewRootCommand(cli.Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }})
	root.SetArgs([]string{"migrate", "--url", e.url})
	require.NoError(t, root.ExecuteContext(e.ctx))
	require.Equal(t, "catalog migrated (schema trellis)\n", out.String())

	// Idempotent, and another schema is another instance.
	require.Equal(t, "catalog migrated (schema trellis)\n", e.ok("migrate").stdout)
	require.Equal(t, "catalog migrated (schema other)\n", e.ok("migrate", "--schema", "other").stdout)
	var n int
	require.NoError(t, e.db.QueryRow(e.ctx, "SELECT count(*) FROM pg_namespace WHERE nspname IN ('trellis', 'other')").Scan(&n))
	require.Equal(t, 2, n)

	// DATABASE_URL is the default for --url.
	var out2 bytes.Buffer
	code := cli.Run(e.ctx, []string{"migrate"}, cli.Env{Stdout: &out2, Stderr: &out2,
		Getenv: func(k string) string { return map[string]string{"DATABASE_URL": e.url}[k] }})
	require.Equal(t, cli.ExitOK, code, out2.String())
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{nil, "a command is required"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"stauts"}, "did you mean status?"},
		{[]string{"migrate", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"migrate"}, "no database: pass --url or set DATABASE_URL"},
		{[]string{"migrate", "extra", "--url", "postgres://x"}, `unexpected argument "extra"`},
		{[]string{"status", "--url", "postgres://x:badport/db"}, "the database URL (--url or DATABASE_URL) cannot be parsed"},
		{[]string{"apply", "--url", "postgres://x"}, "expected one STATEMENT (quote it) or -f FILE, got 0 arguments"},
		{[]string{"apply", "-f", "x.sql", "PAUSE TRANSFORM t", "--url", "postgres://x"}, "not both"},
		{[]string{"status", "a", "b", "--url", "postgres://x"}, "expected at most one TARGET, got 2 arguments"},
		{[]string{"backfill", "--url", "postgres://x"}, "expected one TABLE, got 0 arguments"},
		{[]string{"worker", "--staging=false", "--drain", "0", "--url", "postgres://x"}, "nothing to run"},
		{[]string{"demo", "--writers", "0"}, "--writers must be at least 1"},
		{[]string{"bench", "--only", "write,bogus"}, `--only: unknown benchmark "bogus"`},
		{[]string{"quarantined", "extra", "--url", "postgres://x"}, `unexpected argument "extra"`},
		{[]string{"sample", "--url", "postgres://x"}, "expected one ADDRESS (transform or transform.column), got 0 arguments"},
		{[]string{"sample", "t.c", "--limit", "0", "--url", "postgres://x"}, "--limit must be between 1 and 10000, not 0"},
		{[]string{"sample", "t.c", "--after", "tc1:!!", "--url", "postgres://x"}, `--after: "tc1:!!" is not a Trellis sample cursor`},
		{[]string{"poisoned", "--url", "postgres://x"}, "--since is required"},
		{[]string{"poisoned", "--since", "yesterday", "--url", "postgres://x"}, `--since "yesterday": give an RFC 3339 time`},
		{[]string{"poisoned", "--since", "-5m", "--url", "postgres://x"}, "a duration ago must be positive"},
		{[]string{"release-key", "t", "items", "--url", "postgres://x"}, "expected TRANSFORM TABLE KEY, got 2 arguments"},
	} {
		r := runIn(ctx, "", tc.args...)
		require.Equal(t, cli.ExitUsage, r.code, "%v: %s", tc.args, r.stderr)
		require.True(t, strings.HasPrefix(r.stderr, "trellis: "), r.stderr)
		require.Contains(t, r.stderr, tc.msg, "%v", tc.args)
		require.Contains(t, r.stderr, "--help' for usage")
	}
	r := runIn(ctx, "", "--help")
	require.Equal(t, cli.ExitOK, r.code)
	for _, c := range []string{"migrate", "apply", "status", "definitions", "backfill", "worker", "demo", "bench",
		"quarantined", "sample", "poisoned", "release-key"} {
		require.Contains(t, r.stdout, "  "+c+" ")
	}
}

func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	r := runIn(context.Background(), "", "definitions", "--url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	require.Equal(t, cli.ExitError, r.code)
	require.True(t, strings.HasPrefix(r.stderr, "trellis: "), r.stderr)
	require.NotContains(t, r.stderr, "trellis: trellis:")
}

const ordersDDL = `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric NOT NULL, tax numeric NOT NULL, status text);
INSERT INTO orders SELECT g, g, g / 10.0, CASE WHEN g % 3 = 0 THEN 'open' ELSE 'closed' END FROM generate_series(1, 500) g`

func TestApplyFile(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(ordersDDL)
	e.ok("migrate")

	file := e.writeFile("transforms.sql", `-- Order totals, kept up to date by Trellis.
TRANSFORM order_totals FROM orders
  -- the total with tax
  SELECT price + tax AS total, status AS status
  WHERE status <> 'cancelled; really'
;

PAUSE TRANSFORM order_totals;
RESUME TRANSFORM order_totals
`)
	r := e.ok("apply", "-f", file)
	require.Equal(t, []string{"defined public.order_totals", "paused order_totals", "resumed order_totals"}, r.lines())
	require.Empty(t, r.stderr)

	// The definition is stored as written in the file, without the ';'.
	defs := e.ok("definitions", "--json")
	var got []map[string]any
	require.NoError(t, json.Unmarshal([]byte(defs.stdout), &got))
	require.Len(t, got, 1)
	require.Equal(t, "TRANSFORM order_totals FROM orders\n  -- the total with tax\n  SELECT price + tax AS total, status AS status\n  WHERE status <> 'cancelled; really'", got[0]["statement"])

	// Standard input, and a file that fails part-way: the statements before
	// the failing one stay applied.
	stdin := "PAUSE TRANSFORM order_totals\n\nDROP TRANSFORM nope\n;\nDROP TRANSFORM order_totals\n"
	r = runIn(e.ctx, stdin, "apply", "-f", "-", "--url", e.url)
	require.Equal(t, cli.ExitError, r.code)
	require.Equal(t, "paused order_totals\n", r.stdout)
	require.Equal(t, `trellis: statement 2 of 3 (line 3 of standard input: "DROP TRANSFORM nope") failed: no transform writes nope; `+
		"statement 1 before it stays applied, statement 3 was not run\n", r.stderr)
	st := e.ok("status", "order_totals").stdout
	require.Contains(t, st, "state:      paused")

	// A syntax error in a later statement: where it is, and what is applied.
	bad := e.writeFile("bad.sql", "RESUME TRANSFORM order_totals;\n\n-- broken\nTRANSFORM t FROM orders\nSELECT price + AS x;\nPAUSE TRANSFORM order_totals;\n")
	r = e.run("apply", "-f", bad)
	require.Equal(t, cli.ExitError, r.code)
	require.Equal(t, "resumed order_totals\n", r.stdout)
	require.Contains(t, r.stderr, fmt.Sprintf(`statement 2 of 3 (line 4 of %s: "TRANSFORM t FROM orders") failed: `, bad))
	require.Contains(t, r.stderr, "at line 2, column 16")
	require.Contains(t, r.stderr, "(lines counted from the statement's first line); statement 1 before it stays applied, statement 3 was not run")

	// Files without statements, and files that do not exist.
	r = e.run("apply", "-f", e.writeFile("empty.sql", "-- nothing\n\n;\n"))
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "holds no statements")
	r = e.run("apply", "-f", filepath.Join(t.TempDir(), "missing.sql"))
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "no such file")
}

func TestApplyStatements(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(ordersDDL)
	e.ok("migrate")

	require.Equal(t, "defined public.order_totals\n", e.ok("apply", "TRANSFORM order_totals FROM orders SELECT price + tax AS total;").stdout)
	require.Equal(t, "resumed nothing (it was not paused)\n", e.ok("apply", "RESUME TRANSFORM order_totals").stdout)
	require.Equal(t, "altered public.order_totals\n", e.ok("apply", "ALTER TRANSFORM order_totals ADD COLUMN status AS status").stdout)
	require.Equal(t, "dropped public.order_totals\n", e.ok("apply", "DROP TRANSFORM order_totals").stdout)

	// A syntax error: exit 1, and the message says where.
	r := e.run("apply", "TRANSFORM t FROM orders\nSELECT price + AS x")
	require.Equal(t, cli.ExitError, r.code)
	require.Empty(t, r.stdout)
	require.True(t, strings.HasPrefix(r.stderr, "trellis: "), r.stderr)
	require.NotContains(t, r.stderr, "trellis: trellis:")
	require.Contains(t, r.stderr, "line 2, column 16")
	require.NotContains(t, r.stderr, "statement 1 of")

	// Errors of the database are reported as the library words them.
	r = e.run("apply", "TRANSFORM t FROM no_such_table SELECT a AS b")
	require.Equal(t, cli.ExitError, r.code)
	require.Equal(t, "trellis: source table no_such_table does not exist\n", r.stderr)
}

func TestStatus(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(ordersDDL)
	e.ok("migrate")
	c := e.workers()
	e.ok("apply", "TRANSFORM order_totals FROM orders SELECT price + tax AS total WHERE status = 'open'")
	e.waitLive(c, "order_totals")

	r := e.ok("status", "order_totals")
	require.Contains(t, r.stdout, "target:     public.order_totals\n")
	require.Contains(t, r.stdout, "state:      live\n")
	require.Contains(t, r.stdout, "statement:  TRANSFORM order_totals FROM orders SELECT price + tax AS total WHERE status = 'open'\n")
	require.Regexp(t, `since:      \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\d+s ago\)`, r.stdout)
	require.NotContains(t, r.stdout, "paused")
	// The same status by its qualified name; the age of since may have
	// ticked between the two calls.
	age := regexp.MustCompile(`\(\d+s ago\)`)
	require.Equal(t, age.ReplaceAllString(r.stdout, "(age)"), age.ReplaceAllString(e.ok("status", "public.order_totals").stdout, "(age)"))

	r = e.ok("status", "--json", "order_totals")
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, "public.order_totals", st["target"])
	require.Equal(t, "live", st["state"])
	require.EqualValues(t, 166, st["build_rows"])
	since, err := time.Parse(time.RFC3339Nano, st["since"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), since, time.Minute)
	for _, k := range []string{"paused_reason", "held_keys", "drain_failure", "capture_failure", "capture_wait", "backfill_failure"} {
		v, ok := st[k]
		require.True(t, ok, k)
		require.Nil(t, v, k)
	}
	for _, k := range []string{"backfilling_columns", "paused_upstream_columns", "source_index_gaps", "correcting"} {
		require.Equal(t, []any{}, st[k], k)
	}

	// Paused: the reason and how to resume.
	e.ok("apply", "PAUSE TRANSFORM order_totals")
	r = e.ok("status", "order_totals")
	require.Contains(t, r.stdout, "state:      paused\n")
	require.Contains(t, r.stdout, "paused: paused by PAUSE TRANSFORM\n")
	require.Contains(t, r.stdout, "fix the cause, then run `trellis apply 'RESUME TRANSFORM order_totals'` to resume")
	r = e.ok("status", "--json", "order_totals")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, "paused by PAUSE TRANSFORM", st["paused_reason"])

	// Unknown targets.
	for _, args := range [][]string{{"status", "nope"}, {"status", "--json", "public.nope"}} {
		r = e.run(args...)
		require.Equal(t, cli.ExitError, r.code)
		require.Empty(t, r.stdout)
		require.Equal(t, fmt.Sprintf("trellis: no transform writes %s (trellis status lists them all)\n", args[len(args)-1]), r.stderr)
	}
}

func TestStatusSourceIndexGap(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, price numeric);
INSERT INTO orders SELECT g, g % 7, g FROM generate_series(1, 50) g`)
	e.ok("migrate")
	e.ok("apply", "TRANSFORM per_customer FROM orders SELECT customer_id AS customer_id, sum(price) AS total GROUP BY customer_id")

	// The gap, on one line with its fix, and that Trellis leaves it to you.
	r := e.ok("status", "per_customer")
	require.Contains(t, r.stdout, "\nmissing source indexes: ")
	require.Contains(t, r.stdout, "Trellis never creates indexes itself\n")
	require.Contains(t, r.stdout, "\n  public.orders (customer_id) for group_by: run: CREATE INDEX ON \"public\".\"orders\" USING btree (customer_id);\n")
	require.NotContains(t, r.stdout, "opted out")

	r = e.ok("status", "--json", "per_customer")
	var st struct {
		Gaps []map[string]any `json:"source_index_gaps"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, []map[string]any{{"table": "public.orders", "columns": []any{"customer_id"}, "role": "group_by",
		"opted_out": false, "fix": `CREATE INDEX ON "public"."orders" USING btree (customer_id);`}}, st.Gaps)

	// Running the fix closes the gap.
	e.exec(st.Gaps[0]["fix"].(string))
	r = e.ok("status", "per_customer")
	require.NotContains(t, r.stdout, "missing source index")
	require.NotContains(t, r.stdout, "CREATE INDEX")
}

func TestBackfill(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int);
CREATE TABLE other (id int PRIMARY KEY);
INSERT INTO src SELECT g, g FROM generate_series(1, 300) g`)
	e.ok("migrate")
	c := e.workers()
	e.ok("apply", "TRANSFORM sums FROM src SELECT v % 3 AS m, sum(v) AS total GROUP BY v % 3")
	e.waitLive(c, "sums")
	const recompute = "SELECT v % 3 AS m, sum(v) AS total FROM src GROUP BY 1"
	e.requireMatches("sums", recompute)

	// Rows change behind capture's back (triggers off): only a re-read finds out.
	// In replica mode (as a replication apply writes), capture triggers do not
	// fire, and nothing about them changes: only a re-read finds these rows.
	e.exec(`BEGIN; SET LOCAL session_replication_role = replica; DELETE FROM src WHERE id > 200; UPDATE src SET v = 0 WHERE id <= 5; COMMIT`)
	r := e.ok("backfill", "src")
	require.Equal(t, "backfill queued for src: its readers re-derive their targets (watch with trellis status)\n", r.stdout)
	require.Empty(t, r.stderr)
	e.waitLive(c, "sums")
	e.requireMatches("sums", recompute)

	// Tables no transform reads, and tables that do not exist.
	r = e.run("backfill", "other")
	require.Equal(t, cli.ExitError, r.code)
	require.Empty(t, r.stdout)
	require.True(t, strings.HasPrefix(r.stderr, "trellis: "), r.stderr)
	require.NotContains(t, r.stderr, "trellis: trellis:")
	require.Contains(t, r.stderr, "not captured")
	r = e.run("backfill", "missing")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "missing does not exist")
}

// requireMatches requires target to hold exactly the rows recompute returns.
func (e *env) requireMatches(target, recompute string) {
	e.t.Helper()
	var missing, extra int
	q := fmt.Sprintf("SELECT (SELECT count(*) FROM ((%s) EXCEPT ALL (TABLE %s)) a), (SELECT count(*) FROM ((TABLE %s) EXCEPT ALL (%s)) b)",
		recompute, target, target, recompute)
	require.NoError(e.t, e.db.QueryRow(e.ctx, q).Scan(&missing, &extra))
	require.Zero(e.t, missing, "%s lacks rows of a fresh recompute", target)
	require.Zero(e.t, extra, "%s has rows a fresh recompute does not", target)
}

func TestDefinitions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(ordersDDL)
	e.ok("migrate")

	require.Equal(t, "[]\n", e.ok("definitions", "--json").stdout)
	require.Equal(t, "no transforms are defined (schema trellis)\n", e.ok("definitions").stdout)

	e.ok("apply", "TRANSFORM order_totals FROM orders SELECT price + tax AS total")
	e.ok("apply", "TRANSFORM open_orders FROM orders SELECT status AS status\nWHERE status = 'open'")
	var defs []struct {
		Target    string    `json:"target"`
		Statement string    `json:"statement"`
		State     string    `json:"state"`
		Since     time.Time `json:"since"`
		Sources   []string  `json:"sources"`
		CreatedAt time.Time `json:"created_at"`
	}
	r := e.ok("definitions", "--json")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &defs))
	require.Len(t, defs, 2)
	require.Equal(t, "public.order_totals", defs[0].Target)
	require.Equal(t, "TRANSFORM order_totals FROM orders SELECT price + tax AS total", defs[0].Statement)
	require.Equal(t, "waiting_to_backfill", defs[0].State)
	require.Equal(t, []string{"public.orders"}, defs[0].Sources)
	require.False(t, defs[0].CreatedAt.IsZero())
	require.False(t, defs[0].Since.IsZero())
	require.Equal(t, "public.open_orders", defs[1].Target)

	lines := e.ok("definitions").lines()
	require.Len(t, lines, 3)
	require.Regexp(t, `^TARGET\s+STATE\s+SINCE\s+STATEMENT$`, lines[0])
	require.Regexp(t, `^public\.order_totals\s+waiting_to_backfill\s+\S+Z\s+TRANSFORM order_totals FROM orders SELECT price \+ tax AS total$`, lines[1])
	require.Regexp(t, `^public\.open_orders\s+waiting_to_backfill\s+\S+Z\s+TRANSFORM open_orders FROM orders SELECT status AS status WHERE status = 'open'$`, lines[2])
}

// background runs a command line (a worker, with short retry pacing) until
// its context is cancelled; the returned function cancels it and returns
// its exit code.
func (e *env) background(logs *syncBuffer, args ...string) func() int {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan int, 1)
	env := cli.WithWorkerPacing(cli.Env{Stdout: io.Discard, Stderr: logs}, 20*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond)
	go func() { done <- cli.Run(ctx, args, env) }()
	return func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(time.Minute):
			e.t.Fatal("the command did not stop")
			return -1
		}
	}
}

// waitLog waits until logs hold text.
func (e *env) waitLog(logs *syncBuffer, text string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool { return strings.Contains(logs.String(), text) }, time.Minute, 10*time.Millisecond,
		"%q never logged; logs:\n%s", text, logs.String())
}

func TestWorker(t *testing.T) {
	t.Parallel()
	e := setup(t)

	// Not migrated yet: the sidecar says so and waits, then starts once
	// the catalog is there.
	var logs syncBuffer
	stop := e.background(&logs, "worker", "--staging", "--drain", "1", "--url", e.url)
	e.waitLog(&logs, "cannot start the workers yet: the catalog is not migrated yet (trellis migrate); retrying")
	e.exec(ordersDDL)
	e.ok("migrate")
	e.waitLog(&logs, `msg="worker started"`)
	e.ok("apply", "TRANSFORM order_totals FROM orders SELECT price + tax AS total")
	c, err := trellis.Connect(e.ctx, trellis.Options{URL: e.url, Logger: quietLogger()})
	require.NoError(t, err)
	defer c.Close()
	e.waitLive(c, "order_totals")
	live, err := c.HasLiveStagingWorker(e.ctx)
	require.NoError(t, err)
	require.True(t, live)

	// A second staging worker waits for the first (a rolling deploy); a
	// drain-only sidecar says it runs no staging worker; JSON logs.
	var second, drainOnly syncBuffer
	stopSecond := e.background(&second, "worker", "--staging", "--drain", "0", "--url", e.url)
	e.waitLog(&second, "another process runs the staging worker; retrying")
	stopDrain := e.background(&drainOnly, "worker", "--drain", "1", "--log-format", "json", "--url", e.url)
	e.waitLog(&drainOnly, `"msg":"this process runs no staging worker: exactly one process per instance runs it (trellis worker --staging)"`)
	e.waitLog(&drainOnly, `"msg":"worker started"`)
	require.NotContains(t, drainOnly.String(), "no staging worker is running for this instance")

	require.Equal(t, cli.ExitOK, stop(), logs.String())
	require.Contains(t, logs.String(), `msg="worker stopped"`)
	// The waiting one takes over.
	e.waitLog(&second, `msg="worker started"`)
	require.Equal(t, cli.ExitOK, stopSecond(), second.String())
	require.Equal(t, cli.ExitOK, stopDrain(), drainOnly.String())
	live, err = c.HasLiveStagingWorker(e.ctx)
	require.NoError(t, err)
	require.False(t, live)

	// With no staging worker anywhere, a drain-only sidecar warns.
	var alone syncBuffer
	stopAlone := e.background(&alone, "worker", "--drain", "1", "--url", e.url)
	e.waitLog(&alone, "no staging worker is running for this instance")
	require.Equal(t, cli.ExitOK, stopAlone())

	// A database that cannot be reached: retried with backoff, and the
	// sidecar still stops cleanly.
	var down syncBuffer
	stopDown := e.background(&down, "worker", "--url", "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	e.waitLog(&down, "cannot start the workers yet: the database cannot be reached; retrying")
	require.Equal(t, cli.ExitOK, stopDown(), down.String())

	// Bad log flags are usage errors.
	r := e.run("worker", "--log-format", "xml")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `--log-format "xml": use text or json`)
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestDetectDisruptions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ok("migrate")
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	c := e.workers()
	_, err := c.Define(e.ctx, "TRANSFORM copy FROM src SELECT v AS v")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := c.Status(e.ctx, "copy")
		return err == nil && st.State == trellis.StateLive
	}, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, "no capture disruptions", e.ok("detect-disruptions").lines()[0])
	e.exec(`ALTER TABLE src DISABLE TRIGGER ALL; INSERT INTO src VALUES (1, 1); ALTER TABLE src ENABLE TRIGGER ALL`)
	r := e.run("detect-disruptions")
	require.Equal(t, cli.ExitFound, r.code, "it paused something: the exit status says so")
	require.Contains(t, r.stdout, "disrupted: public.src")
	require.Equal(t, "trellis: capture of 1 table is disrupted: their readers are paused\n", r.stderr)
	st := e.ok("status", "copy").stdout
	require.Contains(t, st, "paused")
}

func TestVersionAndCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := runIn(ctx, "", "version")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `^trellis \S+.* go1\.\d+`, r.stdout)
	for shell, marker := range map[string]string{"bash": "bash completion", "zsh": "#compdef trellis", "fish": "complete -c trellis"} {
		r := runIn(ctx, "", "completion", shell)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, marker, shell)
	}
}

// Every command run before trellis migrate says to run it, never which
// relation PostgreSQL could not find.
func TestCommandsBeforeMigrate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, price int)`)
	file := e.writeFile("t.sql", "TRANSFORM order_totals FROM orders SELECT price AS p")
	for _, args := range [][]string{
		{"status", "order_totals"}, {"status"}, {"definitions"}, {"apply", "TRANSFORM order_totals FROM orders SELECT price AS p"},
		{"apply", "-f", file}, {"sync", "-f", file}, {"quarantined"}, {"poisoned", "--since", "1h"}, {"detect-disruptions"},
		{"backfill", "orders"}, {"self-check", "order_totals"}, {"sample", "order_totals"}, {"dump", "--append", file},
	} {
		r := e.run(args...)
		require.Equal(t, cli.ExitError, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, `the Trellis catalog in schema "trellis" does not exist`, "%v", args)
		require.Contains(t, r.stderr, "(`trellis migrate` does that)", "%v", args)
		require.NotContains(t, r.stderr, "relation", "%v", args)
	}
}

func TestStatusOverview(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.ok("migrate")
	require.Equal(t, "no transforms (trellis apply or trellis sync defines them)\n", e.ok("status").stdout)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, price int, status text); INSERT INTO orders SELECT g, g, 'open' FROM generate_series(1, 20) g`)
	c := e.workers()
	e.ok("apply", "TRANSFORM order_totals FROM orders SELECT price AS total, status AS status")
	e.ok("apply", "TRANSFORM by_status FROM order_totals SELECT status AS status, sum(total) AS n GROUP BY status")
	e.waitLive(c, "order_totals")
	e.waitLive(c, "by_status")
	e.ok("apply", "PAUSE TRANSFORM by_status")

	lines := e.ok("status").lines()
	require.Len(t, lines, 4, "%q", lines)
	require.Regexp(t, `^TARGET\s+STATE\s+SINCE\s+PENDING\s+LAG\s+HELD\s+PROBLEMS$`, lines[0])
	require.Regexp(t, `^order_totals\s+live\s+\d+s ago\s+-\s+-\s+-\s+-$`, lines[1])
	require.Regexp(t, `^by_status\s+paused\s+\d+s ago\s+.*paused: paused by PAUSE TRANSFORM; 1 missing source index$`, lines[2])

	var sts []map[string]any
	require.NoError(t, json.Unmarshal([]byte(e.ok("status", "--json").stdout), &sts))
	require.Len(t, sts, 2)
	require.Equal(t, "public.order_totals", sts[0]["target"])
	require.Equal(t, "paused", sts[1]["state"])

	// --watch prints again until interrupted; not a terminal: each print
	// after a line with the time.
	ctx, cancel := context.WithCancel(e.ctx)
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"status", "--watch", "--interval", "50ms", "--url", e.url}, cli.Env{Stdout: &out, Stderr: io.Discard})
	}()
	require.Eventually(t, func() bool { return strings.Count(out.String(), "\n-- ") >= 2 }, time.Minute, 10*time.Millisecond)
	cancel()
	require.Equal(t, cli.ExitOK, <-done)
	require.True(t, strings.HasPrefix(out.String(), "-- "), out.String())
	require.Contains(t, out.String(), "order_totals")
}
