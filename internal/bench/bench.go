// Package bench is Trellis's benchmark suite: the figures DESIGN section 7
// asks for, each measured against a baseline taken in the same run and
// reported as a ratio, never asserted as a time.
//
// The benchmarks are:
//
//   - "write": single-row UPDATE throughput of 4 connections on a source
//     table with capture installed (drain running, and capture only) versus
//     the same table with none.
//   - "latency": commit-to-target latency of a writer paced at 500 writes/s,
//     versus the writer's own commit latency.
//   - "drain": changes applied per second when drain workers start on a
//     backlog, versus a bare INSERT ... SELECT ... ON CONFLICT DO UPDATE of
//     the same keys, 10,000 at a time.
//   - "backfill": rows per second from Define to live, versus CREATE TABLE
//     AS plus its primary key (for GROUP BY and JOIN shapes, CREATE TABLE
//     AS of the definition's query plus the target's unique key).
//
// Options.Shape picks the transform they all maintain: a projection of
// bench_src (the default), a GROUP BY of it into 10,000 groups, or its JOIN
// with a 10,000-row bench_customers (see Shapes). The write workload is the
// same single-row UPDATE of bench_src for every shape.
//
// Every benchmark works in its own schemas (a source schema and a catalog
// schema), and in its own database when Run starts its own cluster.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/testpg"
)

// The benchmark names Options.Only accepts, in the order Run runs them.
const (
	Write    = "write"
	Latency  = "latency"
	Drain    = "drain"
	Backfill = "backfill"
	// Compare is the side-by-side benchmark: plain writes, an empty
	// trigger (the floor) and Trellis, interleaved in one run. It runs
	// only when Options.Only names it.
	Compare = "compare"
	// Sustain writes at a steady rate for the whole Options.Duration and
	// samples the ledger's size, the ring's rotations and the workers'
	// memory. It runs only when Options.Only names it.
	Sustain = "sustain"
	// Scale runs short side-by-side phases over numbers of writers,
	// transforms and drain workers. It runs only when Options.Only names
	// it.
	Scale = "scale"
)

// All lists the benchmarks Run runs by default, in the order it runs them.
var All = []string{Write, Latency, Drain, Backfill}

// Known lists every benchmark Options.Only accepts.
var Known = []string{Write, Latency, Drain, Backfill, Compare, Sustain, Scale}

// Defaults of Options.
const (
	DefaultRows     = 1_000_000
	DefaultDuration = 20 * time.Second
	DefaultChanges  = 200_000
)

// Fixed parameters of the benchmarks.
const (
	writeConns      = 4                     // writer connections of the write benchmark
	latencyRate     = 500                   // writes per second of the latency benchmark
	latencyPoll     = time.Millisecond      // how often the latency poller looks at the target
	latencyGrace    = 15 * time.Second      // how long probes may stay unresolved after the writer stops
	drainStmtRows   = 10_000                // rows per UPDATE statement that builds the drain backlog
	drainBatch      = 10_000                // keys per statement of the drain baseline
	statusPoll      = 20 * time.Millisecond // how often Status is polled for live
	liveTimeout     = 10 * time.Minute      // how long a build may take
	convergeTimeout = 30 * time.Second      // the bound of one AwaitConverged call
	convergeMax     = 10 * time.Minute      // how long a benchmark waits for convergence in all
	catchUpMin      = 30 * time.Second      // the write benchmark waits max(this, catchUpPhases phases) for the drain
	catchUpPhases   = 6
	fillerWidth     = 84                     // pgbench_accounts' filler is char(84)
	warmupMax       = 1 * time.Second        // warm-up before each measured write phase
	drainWorkers    = 2                      // drain workers of the worker clients
	targetLatency   = 50 * time.Millisecond  // DESIGN: commit-to-target median under 50 ms
	minPhase        = 100 * time.Millisecond // shortest measured phase
	quiesceMax      = 30 * time.Second       // longest wait for autovacuum before a measurement
)

// Options configure Run. Every field works from its zero value.
type Options struct {
	// URL is the database to run in. The benchmarks create and drop their
	// own schemas in it (bench_<name> and bench_<name>_trellis). Empty:
	// start a throwaway cluster with internal/testpg, give each benchmark a
	// database of its own, and stop the cluster at the end.
	URL string
	// Only is the subset of All to run; empty runs all.
	Only []string
	// Rows is the number of source rows of the write, latency, drain and
	// backfill benchmarks. Default 1,000,000.
	Rows int
	// Duration is the length of each measured phase of the write benchmark
	// (it has five) and of the latency benchmark. Default 20s.
	Duration time.Duration
	// Changes is the backlog of the drain benchmark: that many distinct
	// rows of the Rows-row source (at most all of them) are updated while
	// no drain runs. Default 200,000.
	Changes int
	// Shape is the transform every benchmark maintains: Projection (the
	// default), GroupBy or Join (see Shapes).
	Shape string
	// Durable starts the throwaway server with fsync, synchronous_commit
	// and full_page_writes on (it runs with them off otherwise). It cannot
	// be combined with URL, whose server's own settings apply.
	Durable bool
	// Load paces the side-by-side benchmark's writers: it first measures
	// the plain write rate flat out, then runs every configuration at this
	// fraction of it (0.5: the steady half load issue 13 measures at). 0
	// writes flat out.
	Load float64
	// Rate paces the side-by-side benchmark's writers at this many writes
	// per second in all (0: as Load says). A/B runs of two builds compare
	// at one rate, which Load, measured on a shared machine, is not.
	Rate float64
	// Statements loads pg_stat_statements into the throwaway server, and
	// the side-by-side and sustain benchmarks print the statements their
	// Trellis phases ran, by total time (what each drain page sends).
	Statements bool
	// ScaleWriters, ScaleTransforms and ScaleWorkers are the points of the
	// scale benchmark's three axes: writer connections, transforms on the
	// one source, drain workers (nil: 1, 2, 4, 8; 1, 10, 100; 1, 2, 4).
	ScaleWriters, ScaleTransforms, ScaleWorkers []int
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
}

func (o Options) withDefaults() Options {
	o.Rows = cmp.Or(o.Rows, DefaultRows)
	o.Duration = cmp.Or(o.Duration, DefaultDuration)
	o.Changes = cmp.Or(o.Changes, DefaultChanges)
	o.Shape = cmp.Or(o.Shape, Projection)
	if o.ScaleWriters == nil {
		o.ScaleWriters = DefaultScaleWriters
	}
	if o.ScaleTransforms == nil {
		o.ScaleTransforms = DefaultScaleTransforms
	}
	if o.ScaleWorkers == nil {
		o.ScaleWorkers = DefaultScaleWorkers
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

func (o Options) validate() error {
	for _, n := range o.Only {
		if !slices.Contains(Known, n) {
			return fmt.Errorf("bench: unknown benchmark %q (known: %s)", n, strings.Join(Known, ", "))
		}
	}
	if o.Durable && o.URL != "" {
		return errors.New("bench: Options.Durable applies to the throwaway server, not to a server given by Options.URL")
	}
	if !slices.Contains(Shapes, o.Shape) {
		return fmt.Errorf("bench: unknown shape %q (known: %s)", o.Shape, strings.Join(Shapes, ", "))
	}
	switch {
	case o.Rows < 1:
		return errors.New("bench: Options.Rows must be positive")
	case o.Changes < 1:
		return errors.New("bench: Options.Changes must be positive")
	case o.Duration < minPhase:
		return fmt.Errorf("bench: Options.Duration must be at least %s", minPhase)
	case o.Load < 0 || o.Load > 1:
		return errors.New("bench: Options.Load must be between 0 and 1")
	case o.Rate < 0:
		return errors.New("bench: Options.Rate must not be negative")
	case o.Statements && o.URL != "":
		return errors.New("bench: Options.Statements loads pg_stat_statements into the throwaway server, not into a server given by Options.URL")
	}
	for _, axis := range [][]int{o.ScaleWriters, o.ScaleTransforms, o.ScaleWorkers} {
		for _, n := range axis {
			if n < 1 {
				return errors.New("bench: the scale benchmark's points must be positive")
			}
		}
	}
	return nil
}

func (o Options) runs(name string) bool {
	if len(o.Only) == 0 {
		return slices.Contains(All, name)
	}
	return slices.Contains(o.Only, name)
}

// Result is one figure: a measurement and the baseline it is compared with,
// both taken in the same run.
type Result struct {
	// Name is the benchmark and variant, e.g. "write/run1".
	Name string
	// Baseline and Measured are in Unit.
	Baseline, Measured float64
	Unit               string
	// Ratio is Measured/Baseline. For rates (tx/s, rows/s) higher is
	// better; for latencies (ms) lower is better. Notes say which.
	Ratio float64
	// Notes say what the baseline is and what DESIGN asks for.
	Notes string
	// CPUBaseline and CPUMeasured are the CPU microseconds per change (a
	// write, a key applied, a row built) of the baseline and of the
	// measurement, over every process: the server's (from /proc/<pid>/stat
	// of every process pg_stat_activity lists) and the benchmark's own,
	// which runs the writers and the Trellis workers. 0: not measured (a
	// server on another machine). Unlike rates, they stay comparable when
	// other work shares the machine.
	CPUBaseline, CPUMeasured float64
}

// withCPU sets a result's CPU per change.
func withCPU(r Result, baseline, measured float64) Result {
	r.CPUBaseline, r.CPUMeasured = baseline, measured
	return r
}

// CPURatio is CPUMeasured/CPUBaseline, 0 when either is not measured.
func (r Result) CPURatio() float64 {
	if r.CPUBaseline <= 0 || r.CPUMeasured <= 0 {
		return 0
	}
	return r.CPUMeasured / r.CPUBaseline
}

// least is the smallest positive figure of xs, 0 when none is.
func least(xs []float64) float64 {
	best := 0.0
	for _, x := range xs {
		if x > 0 && (best == 0 || x < best) {
			best = x
		}
	}
	return best
}

func mean(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return (a + b) / 2
}

func result(name string, baseline, measured float64, unit, notes string) Result {
	r := Result{Name: name, Baseline: baseline, Measured: measured, Unit: unit, Notes: notes}
	if baseline > 0 {
		r.Ratio = measured / baseline
	}
	return r
}

// Run runs the benchmarks opts selects and prints a report to w. It returns
// an error when a benchmark fails; the report then holds the figures of
// those that finished.
func Run(ctx context.Context, opts Options, w io.Writer) error {
	_, err := RunResults(ctx, opts, w)
	return err
}

// RunResults is Run that also returns the figures.
func RunResults(ctx context.Context, opts Options, w io.Writer) ([]Result, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &suite{opts: opts, logf: opts.Logf}
	if opts.URL == "" {
		settings := map[string]string{}
		if opts.Durable {
			settings = map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
		}
		if opts.Statements {
			settings["shared_preload_libraries"] = "pg_stat_statements"
		}
		c, err := testpg.Start(ctx, testpg.Options{Settings: settings, Logf: opts.Logf})
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := c.Stop(); err != nil {
				opts.Logf("bench: stopping the cluster: %v", err)
			}
		}()
		s.cluster = c
	}
	header, err := s.describe(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(w, header)

	benches := []struct {
		name string
		fn   func(context.Context, *env) ([]Result, error)
	}{
		{Write, s.write}, {Latency, s.latency}, {Drain, s.drain}, {Backfill, s.backfill}, {Compare, s.compare}, {Sustain, s.sustain}, {Scale, s.scale},
	}
	var all []Result
	var errs []error
	for _, b := range benches {
		if !opts.runs(b.name) {
			continue
		}
		begin := time.Now()
		s.logf("bench %s: starting (load average %s)", b.name, loadAverage())
		res, err := s.runOne(ctx, b.name, b.fn)
		all = append(all, res...)
		if err != nil {
			errs = append(errs, fmt.Errorf("bench %s: %w", b.name, err))
			s.logf("bench %s: failed after %s: %v", b.name, time.Since(begin).Round(time.Millisecond), err)
		} else {
			s.logf("bench %s: done in %s", b.name, time.Since(begin).Round(time.Millisecond))
		}
		if ctx.Err() != nil {
			break
		}
	}
	Print(w, all)
	return all, errors.Join(errs...)
}

// Print writes results as an aligned table.
func Print(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tbaseline\tmeasured\tunit\tratio\tcpu µs/change (base)\tcpu µs/change\tcpu ratio\tnotes")
	for _, r := range results {
		cpuBase, cpu, cpuRatio := "n/a", "n/a", "n/a"
		if r.CPURatio() > 0 {
			cpuBase, cpu, cpuRatio = num(r.CPUBaseline), num(r.CPUMeasured), fmt.Sprintf("%.3f", r.CPURatio())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\n", r.Name, num(r.Baseline), num(r.Measured), r.Unit, r.Ratio, cpuBase, cpu, cpuRatio, r.Notes)
	}
	_ = tw.Flush()
}

func num(f float64) string {
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f >= 10:
		return fmt.Sprintf("%.1f", f)
	default:
		return fmt.Sprintf("%.2f", f)
	}
}

// suite is one Run.
type suite struct {
	opts    Options
	logf    func(string, ...any)
	cluster *testpg.Cluster // nil when running in Options.URL
}

func (s *suite) describe(ctx context.Context) (string, error) {
	url := s.opts.URL
	if s.cluster != nil {
		url = s.cluster.URL("postgres")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", fmt.Errorf("bench: connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version, fsync, syncCommit string
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')").
		Scan(&version, &fsync, &syncCommit); err != nil {
		return "", fmt.Errorf("bench: reading the server's version: %w", err)
	}
	where := "throwaway cluster"
	if s.cluster == nil {
		where = "the server given by URL"
	}
	return fmt.Sprintf("trellis benchmarks: PostgreSQL %s (%s, fsync=%s, synchronous_commit=%s), %d CPUs, load average %s, shape %s, rows %d, changes %d, phase %s",
		version, where, fsync, syncCommit, runtime.NumCPU(), loadAverage(), s.opts.Shape, s.opts.Rows, s.opts.Changes, s.opts.Duration), nil
}

func (s *suite) runOne(ctx context.Context, name string, fn func(context.Context, *env) ([]Result, error)) ([]Result, error) {
	e, err := s.newEnv(ctx, name)
	if err != nil {
		return nil, err
	}
	defer e.close()
	return fn(ctx, e)
}

// env is one benchmark's database and schemas.
type env struct {
	s       *suite
	name    string
	shape   shape
	url     string
	schema  string // sources and targets
	catalog string // the Trellis instance's catalog
	pool    *pgxpool.Pool
	dbName  string // database created for the benchmark; "" in Options.URL
	// buildCPU is the CPU seconds (every process) of the last define, from
	// Define to live; 0 when not measured.
	buildCPU float64
	// defineTook is how long the last Define call took (parsing,
	// validation, the catalog rows and the empty target); builds has the
	// staging worker's build durations, from its log.
	defineTook time.Duration
	builds     buildLog
}

func (s *suite) newEnv(ctx context.Context, name string) (*env, error) {
	e := &env{s: s, name: name, shape: shapeOf(s.opts.Shape), url: s.opts.URL, schema: "bench_" + name, catalog: "bench_" + name + "_trellis"}
	if s.cluster != nil {
		e.dbName = "bench_" + name
		if err := s.cluster.DropDatabase(ctx, e.dbName); err != nil {
			return nil, err
		}
		url, err := s.cluster.CreateDatabase(ctx, e.dbName)
		if err != nil {
			return nil, err
		}
		e.url = url
	}
	pool, err := pgxpool.New(ctx, e.url)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	e.pool = pool
	if err := e.dropSchemas(ctx); err != nil {
		e.pool.Close()
		return nil, err
	}
	for _, sc := range []string{e.schema, e.catalog} {
		if err := e.exec(ctx, "CREATE SCHEMA "+sc); err != nil {
			e.close()
			return nil, err
		}
		if err := e.exec(ctx, fmt.Sprintf("COMMENT ON SCHEMA %s IS '%s'", sc, schemaMarker)); err != nil {
			e.close()
			return nil, err
		}
	}
	if err := e.migrate(ctx); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// schemaMarker is the comment on the schemas the benchmarks create: only
// schemas that carry it are ever dropped.
const schemaMarker = "created by the trellis benchmarks (internal/bench); dropped when they end"

// dropSchemas drops the benchmark's schemas left by an earlier run. A
// schema of that name that the benchmarks did not create is an error, not
// dropped.
func (e *env) dropSchemas(ctx context.Context) error {
	for _, sc := range []string{e.schema, e.catalog} {
		var exists bool
		var comment *string
		err := e.pool.QueryRow(ctx, `SELECT true, obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, sc).Scan(&exists, &comment)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return err
		}
		if comment == nil || *comment != schemaMarker {
			return fmt.Errorf("schema %s exists and was not created by the benchmarks: drop it or run them in another database", sc)
		}
		if err := e.exec(ctx, "DROP SCHEMA "+sc+" CASCADE"); err != nil {
			return err
		}
	}
	return nil
}

func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if e.dbName != "" {
		e.pool.Close()
		if err := e.s.cluster.DropDatabase(ctx, e.dbName); err != nil {
			e.s.logf("bench %s: dropping database %s: %v", e.name, e.dbName, err)
		}
		return
	}
	if err := e.dropSchemas(ctx); err != nil {
		e.s.logf("bench %s: dropping its schemas: %v", e.name, err)
	}
	e.pool.Close()
}

func (e *env) logf(format string, args ...any) {
	e.s.logf("bench "+e.name+": "+format, args...)
}

func (e *env) exec(ctx context.Context, sql string, args ...any) error {
	if _, err := e.pool.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("%s: %w", firstLine(sql), err)
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	return s
}

// table is a schema-qualified name in the benchmark's schema (the names
// used here need no quoting).
func (e *env) table(name string) string { return e.schema + "." + name }

// checkpoint runs CHECKPOINT so that one does not land in a measurement; a
// role that may not is not an error.
func (e *env) checkpoint(ctx context.Context) {
	if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		e.logf("CHECKPOINT failed (measurements may be noisier): %v", err)
	}
}

// connect opens a Trellis client of the benchmark's instance.
func (e *env) connect(ctx context.Context, staging bool, workers int) (*trellis.Client, error) {
	return trellis.Connect(ctx, trellis.Options{
		URL:          e.url,
		Schema:       e.catalog,
		TargetSchema: e.schema,
		Staging:      staging,
		DrainWorkers: workers,
		Logger:       slog.New(&e.builds),
	})
}

// migrate creates the benchmark's Trellis catalog.
func (e *env) migrate(ctx context.Context) error {
	c, err := e.connect(ctx, false, 0)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if err := c.Migrate(ctx); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	return nil
}

// define defines the transform and waits until it is live. It returns how
// long Define to live took.
func (e *env) define(ctx context.Context, c *trellis.Client) (time.Duration, error) {
	// The first statement a process parses pays for starting the parser
	// (about 1.5 s); a statement that does not parse warms it up without
	// touching the database, so the timing below is the build's alone.
	if _, err := c.Define(ctx, "TRANSFORM"); err == nil || (trellis.CodeOf(err) != trellis.CodeParse && trellis.CodeOf(err) != trellis.CodeValidation) {
		return 0, fmt.Errorf("warming up the parser: want a parse error, got %v", err)
	}
	stmts := e.transforms()
	for _, up := range stmts[:len(stmts)-1] {
		// A chain's upstream, built before the measured definition.
		target, err := c.Define(ctx, up)
		if err != nil {
			return 0, fmt.Errorf("defining the upstream: %w", err)
		}
		if err := waitLive(ctx, c, target); err != nil {
			return 0, err
		}
		if err := e.exec(ctx, "ANALYZE "+target); err != nil {
			return 0, err
		}
	}
	e.quiesce(ctx)
	m := e.startMeter(ctx)
	begin := time.Now()
	target, err := c.Define(ctx, stmts[len(stmts)-1])
	if err != nil {
		return 0, fmt.Errorf("defining: %w", err)
	}
	e.defineTook = time.Since(begin)
	if err := waitLive(ctx, c, target); err != nil {
		return 0, err
	}
	took := time.Since(begin)
	e.buildCPU, _ = cpuSince(m.start, e.sampleCPU(ctx))
	// The benchmarks measure the configuration Trellis asks for, as a user
	// who runs the fixes SourceIndexGaps lists gets it. The sources' gaps
	// were fixed before their rows were written (createSource); a gap on
	// a target (a chain's upstream) is fixed now. A gap left after that
	// is the setup's mistake.
	st, err := c.Status(ctx, target)
	if err != nil {
		return 0, fmt.Errorf("reading the status of %s: %w", target, err)
	}
	if st != nil && len(st.SourceIndexGaps) > 0 {
		var fixed []string
		for _, g := range st.SourceIndexGaps {
			if err := e.exec(ctx, g.Fix); err != nil {
				return 0, fmt.Errorf("running a fix SourceIndexGaps listed: %w", err)
			}
			if err := e.exec(ctx, "ANALYZE "+g.Table); err != nil {
				return 0, err
			}
			fixed = append(fixed, g.Fix)
		}
		e.logf("ran the fixes SourceIndexGaps lists on %s's sources: %s", target, strings.Join(fixed, " "))
		if st, err = c.Status(ctx, target); err != nil {
			return 0, fmt.Errorf("reading the status of %s: %w", target, err)
		}
	}
	if st != nil && len(st.SourceIndexGaps) > 0 {
		var gaps []string
		for _, g := range st.SourceIndexGaps {
			gaps = append(gaps, g.Fix)
		}
		return 0, fmt.Errorf("the status of %s lists source indexes it needs: %s", target, strings.Join(gaps, " "))
	}
	if e.shape.name == Quarantine {
		bare := target[strings.LastIndexByte(target, '.')+1:]
		q, err := c.QuarantineStatus(ctx, bare+".r")
		if err != nil {
			return 0, err
		}
		if q.State != trellis.StatePaused {
			return 0, fmt.Errorf("the quarantine shape's column %s.r was not quarantined by its build: %+v", bare, q)
		}
		e.logf("%s.r is quarantined on %d rows; the benchmarks measure the healthy column v", bare, q.Rows)
	}
	// Analyse the new target, as autovacuum would within a minute: without
	// statistics the drain's recompute can pick a plan that reads the whole
	// target (see the package's report). The benchmarks measure the steady
	// state, not that first minute.
	if err := e.exec(ctx, "ANALYZE "+target); err != nil {
		return 0, err
	}
	return took, nil
}

// quiesce waits (at most quiesceMax) until no autovacuum worker runs in the
// database, so that one started by the previous step does not land in the
// next measurement. It is best effort.
func (e *env) quiesce(ctx context.Context) {
	deadline := time.Now().Add(quiesceMax)
	for {
		var n int
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE backend_type = 'autovacuum worker' AND datname = current_database()`).Scan(&n)
		if err != nil || n == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.logf("autovacuum still running after %s; measuring anyway", quiesceMax)
			return
		}
		if !backoff.Sleep(ctx, 100*time.Millisecond) {
			return
		}
	}
}

// waitLive polls Status every 20 ms until the transform is live.
func waitLive(ctx context.Context, c *trellis.Client, target string) error {
	ctx, cancel := context.WithTimeout(ctx, liveTimeout)
	defer cancel()
	t := time.NewTicker(statusPoll)
	defer t.Stop()
	var last *trellis.Status
	for {
		st, err := c.Status(ctx, target)
		switch {
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("reading the status of %s: %w", target, err)
		case st == nil && err == nil:
			return fmt.Errorf("no transform writes %s", target)
		case st != nil && st.State == trellis.StateLive:
			return nil
		case st != nil && st.State == trellis.StatePaused:
			return fmt.Errorf("%s is paused: %s", target, st.PausedReason)
		}
		if st != nil {
			last = st
		}
		select {
		case <-ctx.Done():
			msg := "no status"
			if last != nil {
				msg = fmt.Sprintf("state %s, %d rows built", last.State, last.BuildRows)
				if f := last.BackfillFailure; f != nil {
					msg += ", build failing: " + f.LastError
				}
			}
			return fmt.Errorf("%s did not get live within %s (%s): %w", target, liveTimeout, msg, ctx.Err())
		case <-t.C:
		}
	}
}

// converge waits until every change committed before the call has reached
// the targets, calling AwaitConverged until it succeeds.
func converge(ctx context.Context, c *trellis.Client) error {
	return convergeWithin(ctx, c, convergeMax)
}

// errBehind is convergeWithin's error when the drain did not catch up in time.
var errBehind = errors.New("the drain did not catch up")

// convergeWithin is converge bounded by limit: past it, it returns an
// error wrapping errBehind.
func convergeWithin(ctx context.Context, c *trellis.Client, limit time.Duration) error {
	token, err := c.WatermarkToken(ctx)
	if err != nil {
		return fmt.Errorf("taking a watermark: %w", err)
	}
	deadline := time.Now().Add(limit)
	for {
		wait := min(convergeTimeout, time.Until(deadline))
		if wait <= 0 {
			return fmt.Errorf("waiting for convergence: %w within %s", errBehind, limit)
		}
		err := c.AwaitConverged(ctx, token, wait)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case trellis.CodeOf(err) != trellis.CodeTimeout:
			return fmt.Errorf("waiting for convergence: %w", err)
		}
	}
}

// loadAverage is the 1-minute load average, "?" where it cannot be read.
// Other work on the machine is the main source of noise.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// quantile returns the q-quantile (0..1) of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sortedMillis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	sort.Float64s(out)
	return out
}
