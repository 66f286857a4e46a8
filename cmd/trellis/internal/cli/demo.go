package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/testpg"
)

// The demo's own names: it never touches objects it did not create.
const (
	demoCatalog  = "trellis_demo" // catalog schema, and the throwaway database
	demoSource   = "demo_orders"
	demoTarget   = "demo_order_totals"
	demoProbes   = 8 // probe rows, ids -1 .. -demoProbes
	probeEvery   = 2 * time.Millisecond
	probeTimeout = 10 * time.Second
)

// demoOptions are the demo's flags.
type demoOptions struct {
	rows     int
	writers  int
	duration time.Duration
}

func newDemoCmd(g *globals) *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show Trellis at work: a transform kept fresh under concurrent writes",
		Long: `demo defines a transform over a table of orders, then runs writers doing
random inserts, updates and deletes, and prints once a second how many
writes went through and how long a committed write took to reach the
target (measured by probes). At the end it checks that the target equals a
fresh recompute of its definition.

Without --url or DATABASE_URL it runs on a throwaway PostgreSQL server that
it starts and removes. With a database, it uses the catalog schema
trellis_demo and the tables demo_orders and demo_order_totals (it refuses
to start if any of them exists) and drops them at the end, also when
interrupted with Ctrl-C.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.rows < 0:
				return usageErrorf("--rows must not be negative")
			case o.writers < 1:
				return usageErrorf("--writers must be at least 1")
			case o.duration <= 0:
				return usageErrorf("--duration must be positive")
			}
			return runDemo(cmd.Context(), g, o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.rows, "rows", 10000, "rows of demo_orders before the transform is defined")
	f.IntVar(&o.writers, "writers", 4, "concurrent writers")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "how long the writers run")
	return cmd
}

// demo is one run of the demo.
type demo struct {
	g      *globals
	o      demoOptions
	w      io.Writer
	url    string
	pool   *pgxpool.Pool // the demo's own SQL: setup, writers, probes, checks
	client *trellis.Client
	source string // qualified, quoted
	target string // qualified, quoted

	// What exists now and must be removed at the end.
	createdCatalog, createdSource, definedTarget bool
}

// demoPoolConfig is the configuration of the demo's own pool. Like every
// connection Trellis opens, it pins search_path, so the demo's statements
// never reach a function or operator planted on the role's or database's
// path.
func demoPoolConfig(url string, writers int) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("the database URL cannot be parsed: %w", err)
	}
	cfg.MaxConns = int32(writers + 4)
	cfg.ConnConfig.RuntimeParams["application_name"] = "trellis demo"
	cfg.ConnConfig.RuntimeParams["search_path"] = ident.SearchPath
	return cfg, nil
}

func runDemo(ctx context.Context, g *globals, o demoOptions, w io.Writer) (err error) {
	d := &demo{g: g, o: o, w: w, url: g.databaseURL()}
	if d.url == "" {
		fmt.Fprintln(w, "no --url or DATABASE_URL: starting a throwaway PostgreSQL server")
		cluster, err := testpg.Start(ctx, testpg.Options{})
		if err != nil {
			return fmt.Errorf("starting a throwaway PostgreSQL server: %w", err)
		}
		defer func() {
			if serr := cluster.Stop(); serr != nil {
				err = errors.Join(err, fmt.Errorf("stopping the throwaway server: %w", serr))
			}
		}()
		if d.url, err = cluster.CreateDatabase(ctx, demoCatalog); err != nil {
			return err
		}
		fmt.Fprintf(w, "PostgreSQL %s on 127.0.0.1:%d (removed at the end)\n", cluster.Version(), cluster.Port())
	}
	cfg, err := demoPoolConfig(d.url, o.writers)
	if err != nil {
		return err
	}
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	defer d.pool.Close()
	ts := pgx.Identifier{g.targetSchema}.Sanitize()
	d.source, d.target = ts+"."+pgx.Identifier{demoSource}.Sanitize(), ts+"."+pgx.Identifier{demoTarget}.Sanitize()

	if err := d.preflight(ctx); err != nil {
		return err
	}
	defer func() {
		if cerr := d.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if err := d.setup(ctx); err != nil {
		return d.interrupted(ctx, err)
	}
	return d.run(ctx)
}

// interrupted replaces an error caused by Ctrl-C with a plain message.
func (d *demo) interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.New("demo interrupted; cleaned up what it created")
	}
	return err
}

// preflight refuses to start when the demo's names are taken.
func (d *demo) preflight(ctx context.Context) error {
	var src, tgt, schema bool
	err := d.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
		EXISTS (SELECT FROM pg_namespace WHERE nspname = $3)`, d.source, d.target, demoCatalog).Scan(&src, &tgt, &schema)
	if err != nil {
		return fmt.Errorf("checking the database: %w", err)
	}
	left := "; if an earlier demo left it behind, drop it"
	switch {
	case src:
		return fmt.Errorf("table %s already exists: the demo creates and drops its own table of that name, and will not touch yours%s", d.sourceName(), left)
	case tgt:
		return fmt.Errorf("table %s already exists: the demo's transform creates it%s", d.targetName(), left)
	case schema:
		return fmt.Errorf("schema %s already exists: the demo uses it as its own catalog and drops it at the end%s (DROP SCHEMA %s CASCADE)", demoCatalog, left, demoCatalog)
	}
	return nil
}

func (d *demo) connect(ctx context.Context, opts trellis.Options) (*trellis.Client, error) {
	opts.URL, opts.Schema, opts.TargetSchema = d.url, demoCatalog, d.g.targetSchema
	logger, err := d.g.logger(slog.LevelWarn)
	if err != nil {
		return nil, err
	}
	opts.Logger = logger
	return trellis.Connect(ctx, opts)
}

// setup migrates, starts the workers, creates and fills the source, defines
// the transform and waits for it to be live.
func (d *demo) setup(ctx context.Context) error {
	admin, err := d.connect(ctx, trellis.Options{})
	if err != nil {
		return err
	}
	d.createdCatalog = true // from here on, cleanup drops the schema if it exists
	err = admin.Migrate(ctx)
	admin.Close()
	if err != nil {
		return err
	}
	fmt.Fprintf(d.w, "catalog migrated (schema %s)\n", demoCatalog)
	if d.client, err = d.connect(ctx, trellis.Options{Staging: true, DrainWorkers: 2}); err != nil {
		return err
	}

	d.createdSource = true
	begin := time.Now()
	_, err = d.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, customer int, price numeric, tax numeric, status text);
		INSERT INTO %[1]s SELECT g, 1 + (random() * 999)::int, round((random() * 100)::numeric, 2), round((random() * 10)::numeric, 2),
			(ARRAY['open', 'paid', 'shipped', 'cancelled'])[1 + (random() * 3)::int] FROM generate_series(1, %[2]d) g;
		INSERT INTO %[1]s SELECT -g, 0, 0, 0, 'probe' FROM generate_series(1, %[3]d) g;
		ANALYZE %[1]s`, d.source, d.o.rows, demoProbes))
	if err != nil {
		return fmt.Errorf("creating %s: %w", d.sourceName(), err)
	}
	fmt.Fprintf(d.w, "created %s with %d rows (and %d probe rows) in %s\n", d.sourceName(), d.o.rows, demoProbes, since(begin))

	stmt := fmt.Sprintf("TRANSFORM %s FROM %s SELECT price + tax AS total, status AS status WHERE status <> 'cancelled'",
		d.targetName(), d.sourceName())
	fmt.Fprintln(d.w, stmt)
	res, err := d.client.Apply(ctx, stmt)
	if err != nil {
		return err
	}
	d.definedTarget = true
	fmt.Fprintln(d.w, describeApplied(res))

	begin = time.Now()
	for {
		st, err := d.client.Status(ctx, d.g.targetSchema+"."+demoTarget)
		if err != nil {
			return err
		}
		switch {
		case st == nil:
			return fmt.Errorf("the transform writing %s disappeared", d.targetName())
		case st.State == trellis.StateLive:
			fmt.Fprintf(d.w, "backfill: %d rows, live in %s\n", st.BuildRows, since(begin))
			return nil
		case st.State == trellis.StatePaused:
			return fmt.Errorf("the transform paused during its backfill: %s", st.PausedReason)
		}
		if !backoff.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// sourceName and targetName are the demo tables as written in the statement.
func (d *demo) sourceName() string {
	return statementIdent(d.g.targetSchema) + "." + demoSource
}

func (d *demo) targetName() string {
	return statementIdent(d.g.targetSchema) + "." + demoTarget
}

// statementIdent writes an identifier bare when it can be, else quoted.
func statementIdent(s string) string {
	for i, c := range s {
		if !(c == '_' || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')) {
			return pgx.Identifier{s}.Sanitize()
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

// run is the write phase, the summary and the check. Ctrl-C ends the write
// phase early; the summary and the check still run.
func (d *demo) run(ctx context.Context) error {
	fmt.Fprintf(d.w, "running %d writers for %s\n", d.o.writers, d.o.duration)
	wctx, stop := context.WithTimeout(ctx, d.o.duration)
	defer stop()

	var writes atomic.Int64
	var nextID atomic.Int64
	nextID.Store(int64(d.o.rows))
	var wg sync.WaitGroup
	werrs := make(chan error, d.o.writers+1)
	for range d.o.writers {
		wg.Go(func() {
			if err := d.writer(wctx, &writes, &nextID); err != nil && wctx.Err() == nil {
				werrs <- err
				stop()
			}
		})
	}
	var mu sync.Mutex
	var window, all []time.Duration
	var missed int
	wg.Go(func() {
		err := d.probe(wctx, func(lag time.Duration, ok bool) {
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				missed++
				return
			}
			window = append(window, lag)
			all = append(all, lag)
		})
		if err != nil && wctx.Err() == nil {
			werrs <- err
			stop()
		}
	})

	begin := time.Now()
	tick := time.NewTicker(time.Second)
	var lastWrites int64
	for sec := 1; wctx.Err() == nil; {
		select {
		case <-wctx.Done():
			continue
		case <-tick.C:
		}
		n := writes.Load()
		mu.Lock()
		lags := window
		window = nil
		mu.Unlock()
		lag := "no probe finished"
		if len(lags) > 0 {
			slices.Sort(lags)
			lag = fmt.Sprintf("median %s, max %s over %d probes", ms(percentile(lags, 50)), ms(lags[len(lags)-1]), len(lags))
		}
		fmt.Fprintf(d.w, "%3ds  %8d writes (%5d/s)  commit-to-target lag %s\n", sec, n, n-lastWrites, lag)
		lastWrites = n
		sec++
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(begin)
	close(werrs)
	if err := <-werrs; err != nil {
		return err
	}
	if ctx.Err() != nil {
		fmt.Fprintln(d.w, "interrupted: writers stopped early")
	}

	n := writes.Load()
	slices.Sort(all)
	fmt.Fprintf(d.w, "summary: %d writes in %s (%.0f writes/s)", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	if len(all) > 0 {
		fmt.Fprintf(d.w, "; commit-to-target lag p50 %s, p99 %s, max %s over %d probes",
			ms(percentile(all, 50)), ms(percentile(all, 99)), ms(all[len(all)-1]), len(all))
	}
	if missed > 0 {
		fmt.Fprintf(d.w, "; %d probes not seen within %s", missed, probeTimeout)
	}
	fmt.Fprintln(d.w)
	return d.verify()
}

// writer runs random inserts, updates and deletes until ctx ends.
func (d *demo) writer(ctx context.Context, writes, nextID *atomic.Int64) error {
	statuses := []string{"open", "paid", "shipped", "cancelled"}
	ins := fmt.Sprintf("INSERT INTO %s VALUES ($1, $2, $3, $4, $5)", d.source)
	upd := fmt.Sprintf("UPDATE %s SET price = $2, status = $3 WHERE id = $1", d.source)
	del := fmt.Sprintf("DELETE FROM %s WHERE id = $1", d.source)
	// A statement in flight when the writes stop runs to its end, so no
	// write commits after the writers have returned (and after verify's
	// watermark): the stop is checked between statements only.
	sctx := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		price := fmt.Sprintf("%d.%02d", rand.IntN(100), rand.IntN(100))
		status := statuses[rand.IntN(len(statuses))]
		var err error
		switch r := rand.IntN(4); {
		case r == 0:
			id := nextID.Add(1)
			_, err = d.pool.Exec(sctx, ins, id, 1+rand.IntN(1000), price, fmt.Sprintf("%d.%02d", rand.IntN(10), rand.IntN(100)), status)
		case r == 1:
			_, err = d.pool.Exec(sctx, del, 1+rand.Int64N(max(1, nextID.Load())))
		default:
			_, err = d.pool.Exec(sctx, upd, 1+rand.Int64N(max(1, nextID.Load())), price, status)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("a writer failed: %w", err)
		}
		writes.Add(1)
	}
	return nil
}

// probe measures commit-to-target lag until ctx ends: it sets a probe row
// to a new value, notes when the write committed, and polls the target
// every 2ms until the value is there.
func (d *demo) probe(ctx context.Context, report func(lag time.Duration, ok bool)) error {
	upd := fmt.Sprintf("UPDATE %s SET price = $2 WHERE id = $1", d.source)
	read := fmt.Sprintf("SELECT total = $2 FROM %s WHERE id = $1", d.target)
	for seq := 1; ctx.Err() == nil; seq++ {
		id := -int64(1 + seq%demoProbes)
		value := fmt.Sprint(seq)
		if _, err := d.pool.Exec(context.WithoutCancel(ctx), upd, id, value); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("a probe write failed: %w", err)
		}
		committed := time.Now()
		for {
			var seen bool
			err := d.pool.QueryRow(ctx, read, id, value).Scan(&seen)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("a probe read failed: %w", err)
			}
			if seen {
				report(time.Since(committed), true)
				break
			}
			if time.Since(committed) > probeTimeout {
				report(0, false)
				break
			}
			if !backoff.Sleep(ctx, probeEvery) {
				return nil
			}
		}
	}
	return nil
}

// verify waits until every write reached the target and compares it with
// a fresh recompute of the definition, both ways. It runs even after
// Ctrl-C ended the writes, with its own deadline.
func (d *demo) verify() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin := time.Now()
	tok, err := d.client.WatermarkToken(ctx)
	if err != nil {
		return err
	}
	for {
		err := d.client.AwaitConverged(ctx, tok, 20*time.Second)
		if err == nil {
			break
		}
		if trellis.CodeOf(err) != trellis.CodeTimeout || ctx.Err() != nil {
			return err
		}
		fmt.Fprintln(d.w, "still waiting for the target to catch up ...")
	}
	fmt.Fprintf(d.w, "caught up with every committed write in %s\n", since(begin))
	recompute := fmt.Sprintf("SELECT id, price + tax AS total, status FROM %s WHERE status <> 'cancelled'", d.source)
	current := fmt.Sprintf("SELECT id, total, status FROM %s", d.target)
	var missing, extra, rows int64
	err = d.pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM ((%s) EXCEPT ALL (%s)) a),
		(SELECT count(*) FROM ((%[2]s) EXCEPT ALL (%[1]s)) b), (SELECT count(*) FROM %[3]s)`, recompute, current, d.target)).
		Scan(&missing, &extra, &rows)
	if err != nil {
		return fmt.Errorf("comparing the target with its definition: %w", err)
	}
	if missing > 0 || extra > 0 {
		return fmt.Errorf("target %s differs from its definition: %d rows missing, %d rows that should not be there", d.targetName(), missing, extra)
	}
	fmt.Fprintf(d.w, "target matches its definition: %d rows\n", rows)
	return nil
}

// cleanup removes what the demo created: its transform (and so its
// target), its source table and its catalog schema, whichever exist. It
// runs after Ctrl-C too, on its own deadline. preflight made sure none of
// them existed before the demo.
func (d *demo) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs, dropped []string
	fail := func(err error, format string, args ...any) {
		errs = append(errs, fmt.Sprintf(format, args...)+": "+message(err))
	}
	if d.client != nil {
		if d.definedTarget {
			if _, err := d.client.Apply(ctx, "DROP TRANSFORM "+d.targetName()); err != nil {
				fail(err, "dropping the demo's transform")
			} else {
				dropped = append(dropped, d.targetName())
			}
		}
		d.client.Close()
	}
	drop := func(what, exists, existsArg, sql string) {
		var ok bool
		if err := d.pool.QueryRow(ctx, exists, existsArg).Scan(&ok); err != nil {
			fail(err, "looking for %s", what)
			return
		}
		if !ok {
			return
		}
		if _, err := d.pool.Exec(ctx, sql); err != nil {
			fail(err, "dropping %s", what)
			return
		}
		dropped = append(dropped, what)
	}
	const tableExists = "SELECT to_regclass($1) IS NOT NULL"
	if d.definedTarget { // DROP TRANSFORM dropped it, unless that failed
		drop(d.targetName(), tableExists, d.target, "DROP TABLE "+d.target)
	}
	if d.createdSource {
		drop(d.sourceName(), tableExists, d.source, "DROP TABLE "+d.source)
	}
	if d.createdCatalog {
		drop("schema "+demoCatalog, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", demoCatalog,
			"DROP SCHEMA "+pgx.Identifier{demoCatalog}.Sanitize()+" CASCADE")
	}
	if len(dropped) > 0 {
		fmt.Fprintf(d.w, "cleaned up: dropped %s\n", andList(dropped))
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleaning up: %s", strings.Join(errs, "; "))
	}
	return nil
}

// andList joins "a", "a and b", "a, b and c".
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// percentile is the p-th percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(len(sorted)-1, i-1))]
}

// ms renders a duration in milliseconds with one decimal.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

func since(t time.Time) string {
	return time.Since(t).Round(time.Millisecond).String()
}
