// Package trellis keeps derived tables inside an application's own
// PostgreSQL up to date, incrementally, from one-line TRANSFORM statements:
//
//	TRANSFORM order_totals FROM orders SELECT price + tax AS total
//
// creates public.order_totals, fills it from orders, and from then on
// applies every committed insert, update and delete of orders to it.
//
// A service connects a Client at boot and shares it. Background work runs in
// the clients that ask for it: exactly one client of an instance sets
// Options.Staging, and some set Options.DrainWorkers.
package trellis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/capture"
	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/drain"
	"github.com/trellis-pg/trellis/internal/engine"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/leadership"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/logq"
	"github.com/trellis-pg/trellis/internal/metrics"
	"github.com/trellis-pg/trellis/internal/notifier"
	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/internal/recompute"
	"github.com/trellis-pg/trellis/internal/safe"
	"github.com/trellis-pg/trellis/internal/staging"
)

// Client is a connection to one Trellis instance (a catalog schema in one
// database). It is safe for concurrent use; connect once and share it.
type Client struct {
	opts   Options
	logs   *logq.Queue // never lets logging block the engine
	logger *slog.Logger
	pool   *pgxpool.Pool // calls
	work   *pgxpool.Pool // background workers; nil without any
	eng    *engine.Engine
	cat    *catalog.Catalog

	metrics *metrics.Instance // this instance's series in the process-wide registry

	closeCtx  context.Context
	cancel    context.CancelFunc
	closed    atomic.Bool
	closeOnce sync.Once
	wg        sync.WaitGroup

	elector  *leadership.Elector // holds the instance's staging lock
	notifier *notifier.Notifier
}

// pinnedSearchPath is the search_path of every connection Trellis opens.
const pinnedSearchPath = ident.SearchPath

func poolConfig(opts Options, name string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		return nil, newError(CodeValidation, "Options.URL cannot be parsed: %v", err)
	}
	cfg.MaxConns = opts.MaxConns
	cfg.MinConns = 0
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = name // the user's own, if any, is kept
	}
	// Every statement Trellis runs resolves names as pg_catalog and then
	// the session's temporary schema, never through a search_path the role
	// or database sets, where someone could plant a shadowing function or
	// operator: everything else it names is schema-qualified. A startup
	// parameter is applied after the URL's options=-c..., so it wins over
	// one there, and over search_path in the URL itself; it holds on every
	// new connection of the pool, reconnects included.
	cfg.ConnConfig.RuntimeParams["search_path"] = pinnedSearchPath
	// Literals in Trellis's own statements read as the SQL standard says
	// (a backslash is a character), whatever the database sets; pgx also
	// refuses its simple protocol with standard_conforming_strings off.
	cfg.ConnConfig.RuntimeParams["standard_conforming_strings"] = "on"
	// A bytea or money value's text is what capture renders (it pins the
	// same settings), whatever the database or role sets: the drain reads
	// the ledger's key text back, and renders source keys to match it.
	cfg.ConnConfig.RuntimeParams["bytea_output"] = capture.ByteaOutput
	cfg.ConnConfig.RuntimeParams["lc_monetary"] = capture.Monetary
	// A cancelled context sends PostgreSQL a cancel request, so the server
	// stops the work at once instead of finishing it for nobody.
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, CancelRequestDelay: 0, DeadlineDelay: 2 * time.Second}
	}
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		scanTimesInUTC(conn.TypeMap())
		return nil
	}
	return cfg, nil
}

// definerPath is the search_path a session of url has unpinned (the URL's,
// the role's, the database's or the server's): the one the names in a
// user's statement resolve through. SHOW calls no function a schema on that
// path could shadow.
func definerPath(ctx context.Context, url string) (string, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "", err
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "trellis"
	}
	cfg.RuntimeParams["standard_conforming_strings"] = "on"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var path string
	err = conn.QueryRow(ctx, sqlShowSearchPath, pgx.QueryExecModeSimpleProtocol).Scan(&path)
	return path, err
}

// scanTimesInUTC makes a connection read every timestamptz in UTC. It is
// the one place times are normalised: PostgreSQL keeps microseconds, so
// what every layer reads is UTC at microsecond precision as it comes.
func scanTimesInUTC(m *pgtype.Map) {
	tz := &pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID, Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}}
	m.RegisterType(tz)
	m.RegisterType(&pgtype.Type{Name: "_timestamptz", OID: pgtype.TimestamptzArrayOID, Codec: &pgtype.ArrayCodec{ElementType: tz}})
}

// Connect connects to the database and starts the background work opts asks
// for. It pings the database first, so a bad URL fails here.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	if err := catalog.ValidateSchemas(opts.Schema, opts.TargetSchema); err != nil {
		return nil, translate(ctx, "connecting", err)
	}
	cfg, err := poolConfig(opts, "trellis")
	if err != nil {
		return nil, err
	}
	definer, err := definerPath(ctx, opts.URL)
	if err != nil {
		return nil, translate(ctx, "connecting", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, translate(ctx, "connecting", err)
	}
	var db string
	if err := pool.QueryRow(ctx, sqlCurrentDatabase).Scan(&db); err != nil {
		pool.Close()
		return nil, unavailable(ctx, err)
	}
	logs := logq.New(1024)
	c := &Client{
		opts:   opts,
		logs:   logs,
		logger: slog.New(logs.Handler(opts.Logger.Handler())).With("trellis_instance", db+"/"+opts.Schema),
		pool:   pool,
		cat:    catalog.New(opts.Schema),
	}
	c.metrics = metrics.Open(db + "/" + opts.Schema) // the label the logs carry, on every series
	c.closeCtx, c.cancel = context.WithCancel(context.Background())
	names := capture.Names{Catalog: opts.Schema}
	c.eng = &engine.Engine{Pool: pool, Cat: c.cat, Names: names, TargetSchema: opts.TargetSchema,
		Ledger: &ledger.Ledger{Pool: pool, Cat: c.cat}, DefinerPath: definer, Recompute: c.recomputer(c.logger), Metrics: c.metrics}
	if opts.Staging || opts.DrainWorkers > 0 {
		if err := c.startWorkers(ctx, names); err != nil {
			c.Close()
			return nil, translate(ctx, "starting the background workers", err)
		}
	}
	return c, nil
}

func unavailable(ctx context.Context, err error) error {
	t := translate(ctx, "connecting", err)
	var te *Error
	if errors.As(t, &te) && te.Code == CodeInternal {
		te.Code = CodeUnavailable
	}
	return t
}

func (c *Client) startWorkers(ctx context.Context, names capture.Names) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	err = catalog.Check(ctx, conn.Conn(), c.opts.Schema)
	conn.Release()
	if err != nil {
		return err
	}
	cfg, err := poolConfig(c.opts, "trellis worker")
	if err != nil {
		return err
	}
	if c.work, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	if c.opts.Staging {
		c.elector = &leadership.Elector{Config: cfg.ConnConfig, Schema: c.opts.Schema, Logger: c.logger,
			Unreachable: c.metrics.SampleFailed}
		ok, err := c.elector.Acquire(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return newError(CodeConflict, "another staging worker is live for the instance in schema %q: exactly one client per instance sets Staging", c.opts.Schema)
		}
	}
	// The listener idles in WaitForNotification: a cancel request cannot
	// interrupt that, so it gives up its connection at once instead.
	lcfg := cfg.ConnConfig.Copy()
	lcfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c}
	}
	var liveness func(ctx context.Context, conn *pgx.Conn) error
	if c.opts.DrainWorkers > 0 {
		// The drain workers' liveness lock lives as long as the listening
		// connection.
		liveness = func(ctx context.Context, conn *pgx.Conn) error { return locks.DrainLive(ctx, conn, c.opts.Schema) }
	}
	c.notifier = notifier.New(lcfg, names.StagingChannel(), liveness, c.logger)
	stagingWake := c.notifier.Subscribe()
	if err := c.notifier.Connect(ctx); err != nil {
		return err
	}
	c.background("listener", c.notifier.Run)

	lw := &ledger.Ledger{Pool: c.work, Cat: c.cat} // the workers' ledger
	if c.opts.Staging {
		log := c.logger.With("service", "staging")
		w := &staging.Worker{Pool: c.work, Cat: c.cat, Names: names, Logger: log,
			Wake: stagingWake, PollInterval: max(c.opts.PollInterval, 250*time.Millisecond), Metrics: c.metrics,
			Ledger: lw, Recompute: c.recomputer(log)}
		c.background("staging", func(ctx context.Context) {
			c.elector.Run(ctx, func(ctx context.Context) { safe.Run(ctx, c.panicked("staging"), w.Run) })
		})
	}
	log := c.logger.With("service", "drain")
	de := &drain.Engine{Pool: c.work, Cat: c.cat, Logger: log, PollInterval: c.opts.PollInterval, Metrics: c.metrics,
		Ledger: lw, Recompute: c.recomputer(log)}
	for i := 0; i < c.opts.DrainWorkers; i++ {
		w := de.NewWorker(i, c.notifier.Subscribe())
		c.background("drain", w.Run)
	}
	c.startSelfCheckRunner(lw)
	return nil
}

// background runs a part's loop on a goroutine of the client until the
// client closes: a panic in it is recovered, reported, and the part runs
// again, so it never reaches the host process.
func (c *Client) background(service string, fn func(context.Context)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		safe.Run(c.closeCtx, c.panicked(service), fn)
	}()
}

// panicked reports a recovered panic of a background part: logged with
// its stack, and counted.
func (c *Client) panicked(service string) func(*safe.PanicError) {
	return func(p *safe.PanicError) {
		c.metrics.Panic(service)
		c.logger.Error("a background part panicked; it runs again", "service", service, "panic", fmt.Sprint(p.Value), "stack", p.Stack)
	}
}

// recomputer is how every part of the client (calls, the staging worker's
// builds, the drain workers) is configured to recompute keys: one catalog
// and one metrics instance; logger is the part's, so its records name it.
func (c *Client) recomputer(logger *slog.Logger) *recompute.Recomputer {
	return &recompute.Recomputer{Cat: c.cat, Logger: logger, Metrics: c.metrics}
}

// Close cancels the calls in flight (they return a CodeValidation error),
// stops the background workers and waits for them, and closes the pools.
// A second Close returns nil.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.cancel()
		c.wg.Wait()
		if c.elector != nil {
			c.elector.Close()
		}
		if c.work != nil {
			c.work.Close()
		}
		c.pool.Close()
		c.metrics.Close()
		c.logs.Close()
	})
	return nil
}

// call runs fn with the call deadline, cancelled by Close, and turns any
// error into a *Error.
func (c *Client) call(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	if c.closed.Load() {
		return errClosed
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	stop := context.AfterFunc(c.closeCtx, cancel)
	defer stop()
	err := fn(ctx)
	if err == nil {
		return nil
	}
	if c.closed.Load() {
		return errClosed
	}
	if pgerr.Is(err, pgerrcode.UndefinedTable, pgerrcode.InvalidSchemaName, pgerrcode.UndefinedFunction) {
		// A catalog that is missing or behind: say so, not which relation.
		if cerr := c.checkCatalog(ctx); cerr != nil {
			return translate(ctx, op, cerr)
		}
	}
	return translate(ctx, op, err)
}

// checkCatalog reports a catalog that is missing or at another version
// (catalog.Check).
func (c *Client) checkCatalog(ctx context.Context) error {
	conn, err := c.pool.Acquire(context.WithoutCancel(ctx))
	if err != nil {
		return nil
	}
	defer conn.Release()
	check, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return catalog.Check(check, conn.Conn(), c.opts.Schema)
}

// Config returns the configuration the client connected with.
func (c *Client) Config() Config {
	return Config{Schema: c.opts.Schema, TargetSchema: c.opts.TargetSchema, MaxConns: c.opts.MaxConns, AcquireTimeout: CallTimeout}
}

// Migrate creates or upgrades Trellis's catalog in the configured schema.
// It is idempotent and safe on every boot: a fleet booting at once migrates
// once, under an advisory lock.
func (c *Client) Migrate(ctx context.Context) error {
	return c.call(ctx, "migrating the catalog", func(ctx context.Context) error {
		return catalog.Migrate(ctx, c.pool, c.opts.Schema, c.opts.TargetSchema)
	})
}

// Apply runs one statement of Trellis's grammar (TRANSFORM, PAUSE
// TRANSFORM, RESUME TRANSFORM, DROP TRANSFORM, ALTER TRANSFORM) on the
// client's own connections, and reports what it did. A statement that does
// not parse is a CodeParse error and applies nothing.
func (c *Client) Apply(ctx context.Context, statement string) (Applied, error) {
	return c.apply(ctx, "applying a statement", statement, false)
}

// Define registers a TRANSFORM statement and creates its target table, and
// returns the qualified target ("schema.table"). The transform starts at
// StateWaitingToBackfill; poll Status for StateLive. Any other statement
// form is refused with CodeValidation before anything is applied.
func (c *Client) Define(ctx context.Context, statement string) (string, error) {
	res, err := c.apply(ctx, "defining a transform", statement, true)
	if err != nil {
		return "", err
	}
	return res.(TransformDefined).Target, nil
}

// apply parses a statement, then runs it within the call's deadline. The
// parse needs no database; the first one in a process initialises the
// parser, which is not charged to the call's deadline.
func (c *Client) apply(ctx context.Context, op, statement string, onlyTransform bool) (Applied, error) {
	if c.closed.Load() {
		return nil, errClosed
	}
	st, err := engine.Parse(statement)
	if err != nil {
		return nil, translate(ctx, op, err)
	}
	var res Applied
	err = c.call(ctx, op, func(ctx context.Context) error {
		var err error
		res, err = c.eng.ApplyParsed(ctx, st, statement, onlyTransform)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// RequestBackfill re-reads a captured source table ("orders" or
// "public.orders", resolved like a name in a statement) and re-derives every
// transform reading it: each reports StateBackfilling until its target
// agrees with the source again, target rows nothing backs any more deleted.
// It returns once the rebuild is queued. A table Trellis does not capture is
// refused with CodeValidation.
func (c *Client) RequestBackfill(ctx context.Context, sourceTable string) error {
	return c.call(ctx, "requesting a backfill", func(ctx context.Context) error {
		return c.eng.RequestBackfill(ctx, sourceTable)
	})
}

// Status reports the transform that writes target ("order_totals" or
// "public.order_totals"); nil, nil when no transform does.
func (c *Client) Status(ctx context.Context, target string) (*Status, error) {
	var st *Status
	err := c.call(ctx, "reading a status", func(ctx context.Context) error {
		var err error
		st, err = c.eng.Status(ctx, target)
		return err
	})
	return st, err
}

// Definitions lists every registered transform, oldest first.
func (c *Client) Definitions(ctx context.Context) ([]DefinitionSummary, error) {
	var out []DefinitionSummary
	err := c.call(ctx, "listing definitions", func(ctx context.Context) error {
		ts, _, err := c.cat.Transforms(ctx, c.pool)
		if err != nil {
			return err
		}
		out = make([]DefinitionSummary, 0, len(ts))
		for _, t := range ts {
			out = append(out, DefinitionSummary{
				Target: t.Target.String(), Statement: t.Statement, State: t.State,
				Since: t.StateSince, CreatedAt: t.CreatedAt,
				Sources: t.Spec.Tables(), Views: t.Spec.ViewNames(),
			})
		}
		return nil
	})
	return out, err
}

// DetectCaptureDisruptions pauses, now, every transform reading a table
// whose capture was changed outside Trellis (a trigger disabled and
// re-enabled, dropped or replaced, the capture function replaced, the table
// gone), and returns the qualified names of the tables whose capture stands
// disrupted. The staging worker does the same on its own cadence; this is
// for a caller that has just done something that disrupts capture, like a
// fixture load with triggers disabled. Their Status then has a
// CaptureFailure of kind CaptureFailureDisruption; RESUME reinstalls capture
// and re-derives the target. It repairs nothing itself.
func (c *Client) DetectCaptureDisruptions(ctx context.Context) ([]string, error) {
	var out []string
	err := c.call(ctx, "detecting capture disruptions", func(ctx context.Context) error {
		var err error
		out, err = c.eng.DetectCaptureDisruptions(ctx)
		return err
	})
	return out, err
}

// HasLiveStagingWorker reports whether the instance's staging worker is
// alive anywhere in the fleet.
func (c *Client) HasLiveStagingWorker(ctx context.Context) (bool, error) {
	var ok bool
	err := c.call(ctx, "checking for a staging worker", func(ctx context.Context) error {
		var err error
		ok, err = locks.Held(ctx, c.pool, locks.StagingKey(c.opts.Schema))
		return err
	})
	return ok, err
}

// HasLiveDrainWorkers reports whether at least one drain worker of the
// instance is alive anywhere in the fleet.
func (c *Client) HasLiveDrainWorkers(ctx context.Context) (bool, error) {
	var ok bool
	err := c.call(ctx, "checking for drain workers", func(ctx context.Context) error {
		var err error
		ok, err = locks.Held(ctx, c.pool, locks.DrainKey(c.opts.Schema))
		return err
	})
	return ok, err
}

// WatermarkToken returns a token covering every write committed before the
// call. Pass it to AwaitConverged, in this process or another.
func (c *Client) WatermarkToken(ctx context.Context) (Watermark, error) {
	var w Watermark
	err := c.call(ctx, "taking a watermark", func(ctx context.Context) error {
		s, err := c.eng.Snapshot(ctx)
		w = Watermark{snap: s}
		return err
	})
	return w, err
}

// AwaitConverged waits until every change committed in token has reached
// its targets (and the targets of transforms reading them), or timeout
// passes: then it returns a CodeTimeout error; call again to wait longer.
// A call never waits past CallTimeout. It waits for captured changes only:
// a transform that is not live yet may still miss rows, and rows that
// arrive or leave with a partition (ATTACH or DETACH PARTITION on a
// partitioned source) are not captured changes: the staging worker notices
// the partition on its next pass and corrects the readers, which report
// StateBackfilling with Status.Correcting until they agree again. After an
// ATTACH or DETACH, wait for that (Correcting empty, the state live)
// rather than for a watermark.
func (c *Client) AwaitConverged(ctx context.Context, token Watermark, timeout time.Duration) error {
	if token.IsZero() {
		return newError(CodeValidation, "AwaitConverged needs a token from WatermarkToken")
	}
	return c.call(ctx, "waiting for convergence", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := c.eng.AwaitConverged(ctx, token.snap, nil)
		if err != nil && ctx.Err() != nil {
			return newError(CodeTimeout, "changes up to the watermark did not all reach their targets within %s", timeout)
		}
		return err
	})
}

func (c *Client) String() string {
	return fmt.Sprintf("trellis.Client(%s)", c.opts.Schema)
}
