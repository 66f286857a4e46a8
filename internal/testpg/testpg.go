// Package testpg starts throwaway PostgreSQL servers for tests and demos.
//
// A Cluster is a complete, private PostgreSQL server: Start runs initdb into a
// fresh temporary directory (see baseDir), starts postgres on 127.0.0.1 and a free TCP port
// (plus a unix socket inside the temporary directory) and waits until it
// accepts connections. Stop shuts it down and removes the directory.
//
// NewDatabase hands out fresh, empty databases on a cluster started lazily
// once per process (or on the server of TRELLIS_TEST_DATABASE_URL), and
// StopShared stops that cluster. The package does not import testing, so
// the demo can link it; the project's tests reach it through
// internal/testsupport (Main and Database(t)).
//
// The server binaries (initdb, postgres) are looked up on PATH and then in
// /usr/lib/postgresql/*/bin, newest version first. initdb and postgres refuse
// to run as root, so when the process runs as root they are run as the
// "postgres" operating system user.
package testpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Superuser is the name of the superuser role of a Cluster (initdb -U).
const Superuser = "postgres"

// tempPrefix prefixes the name of every cluster's temporary directory.
const tempPrefix = "trellis-testpg-"

// startAttempts is how often Start tries a new port when the chosen one
// turns out to be taken.
const startAttempts = 8

// stopTimeout bounds how long Stop waits for a fast shutdown before it
// escalates to an immediate shutdown and finally SIGKILL.
const stopTimeout = 30 * time.Second

// DefaultSettings are the postgresql.conf settings every Cluster starts
// with, tuned for speed (durability is irrelevant for a throwaway server)
// and for many parallel test databases. Options.Settings is merged over
// them. listen_addresses, unix_socket_directories and port are always set
// by Start.
var DefaultSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	"max_connections":    "400",
	"shared_buffers":     "128MB",
	"log_min_messages":   "warning",
	"max_wal_size":       "2GB",
}

// Cluster is a throwaway PostgreSQL server.
type Cluster struct {
	dir      string // temporary directory holding everything below
	dataDir  string
	sockDir  string
	logPath  string
	port     int
	version  string
	bins     binaries
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the postmaster has exited
	waitErr  error         // result of cmd.Wait, valid once exited is closed
	logf     func(format string, args ...any)
	stopOnce sync.Once
	stopErr  error
}

// Options configures Start.
type Options struct {
	// Settings are extra postgresql.conf settings, merged over
	// DefaultSettings.
	Settings map[string]string
	// Logf, if non-nil, receives server start and stop messages.
	Logf func(format string, args ...any)
}

// binaries are the server programs a cluster runs.
type binaries struct {
	initdb   string
	postgres string
}

// runAs describes the operating system user the server programs run as.
type runAs struct {
	cred *syscall.Credential // nil: the current user
	uid  int
	gid  int
	name string
}

// Start creates and starts a new throwaway PostgreSQL server: initdb into a
// fresh temporary directory, then postgres listening on 127.0.0.1 and a free
// TCP port plus a unix socket in the temporary directory, with trust
// authentication. It returns once the server accepts connections; ctx
// bounds the whole start. The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	begin := time.Now()
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	sweepStale()

	bins, tried, err := findBinaries()
	if err != nil {
		return nil, err
	}
	as, err := serverUser()
	if err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp(baseDir(), tempPrefix)
	if err != nil {
		return nil, fmt.Errorf("testpg: create temp dir: %w", err)
	}
	c := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: dir,
		logPath: filepath.Join(dir, "postgres.log"),
		bins:    bins,
		logf:    logf,
	}
	ok := false
	defer func() {
		if !ok {
			c.kill()
			_ = os.RemoveAll(dir)
		}
	}()
	// The owner file lets sweepStale recognise directories of dead processes.
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("testpg: %w", err)
	}
	if as.cred != nil {
		if err := os.Chown(dir, as.uid, as.gid); err != nil {
			return nil, fmt.Errorf("testpg: chown %s to user %s: %w", dir, as.name, err)
		}
	}

	if err := c.initdb(ctx, as, tried); err != nil {
		return nil, err
	}
	if err := c.writeConfig(opts.Settings); err != nil {
		return nil, err
	}

	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		port, err := pickPort()
		if err != nil {
			return nil, fmt.Errorf("testpg: pick a free port: %w", err)
		}
		retry, err := c.startServer(ctx, as, port)
		if err == nil {
			ok = true
			logf("testpg: started PostgreSQL %s on 127.0.0.1:%d in %s (%s)",
				c.version, c.port, c.dir, time.Since(begin).Round(time.Millisecond))
			return c, nil
		}
		lastErr = err
		if !retry || ctx.Err() != nil {
			return nil, err
		}
		logf("testpg: port %d is taken, retrying with another port", port)
	}
	return nil, fmt.Errorf("testpg: gave up after %d attempts: %w", startAttempts, lastErr)
}

// initdb creates the data directory: a copy of the cached pristine
// template (see template.go) when possible, else a fresh initdb.
func (c *Cluster) initdb(ctx context.Context, as runAs, tried []string) error {
	tmpl, err := dataTemplate(ctx, c.bins, as, tried)
	switch {
	case errors.Is(err, errInitdb):
		return err
	case err != nil:
		c.logf("testpg: no data directory template, running initdb: %v", err)
	default:
		err := copyTree(tmpl, c.dataDir, as)
		if err == nil {
			c.readVersion()
			return nil
		}
		c.logf("testpg: copying data directory template %s failed, running initdb: %v", tmpl, err)
		_ = os.RemoveAll(c.dataDir)
	}
	if err := runInitdb(ctx, c.bins, as, tried, c.dir, c.dataDir); err != nil {
		return err
	}
	c.readVersion()
	return nil
}

func (c *Cluster) readVersion() {
	if v, err := os.ReadFile(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		c.version = strings.TrimSpace(string(v))
	}
}

// errInitdb marks errors of initdb itself.
var errInitdb = errors.New("initdb failed")

// runInitdb runs initdb to create dataDir, with workDir as working directory.
func runInitdb(ctx context.Context, bins binaries, as runAs, tried []string, workDir, dataDir string) error {
	cmd := exec.CommandContext(ctx, bins.initdb,
		"-D", dataDir,
		"-U", Superuser,
		"-A", "trust",
		"-E", "UTF8",
		"--locale=C",
		"--no-sync",
	)
	cmd.Dir = workDir
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: as.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testpg: %w: %s: %v (binaries tried: %s)%s; its output:\n%s",
			errInitdb, bins.initdb, err, strings.Join(tried, ", "), as.describe(), tail(out, 4000))
	}
	return nil
}

// writeConfig appends the merged settings to postgresql.conf.
func (c *Cluster) writeConfig(extra map[string]string) error {
	settings := make(map[string]string, len(DefaultSettings)+len(extra)+2)
	for k, v := range DefaultSettings {
		settings[k] = v
	}
	for k, v := range extra {
		settings[k] = v
	}
	settings["listen_addresses"] = "127.0.0.1"
	settings["unix_socket_directories"] = c.sockDir
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("\n# added by trellis internal/testpg\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(settings[k], "'", "''"))
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("testpg: %w", err)
	}
	_, err = f.WriteString(b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("testpg: write postgresql.conf: %w", err)
	}
	return nil
}

// startServer starts postgres on port and waits until it accepts
// connections. retry reports whether the failure was because the port was
// taken, in which case the caller may try another port.
func (c *Cluster) startServer(ctx context.Context, as runAs, port int) (retry bool, err error) {
	logFile, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return false, fmt.Errorf("testpg: %w", err)
	}
	// Not exec.CommandContext: ctx bounds the start, not the server's life.
	cmd := exec.Command(c.bins.postgres, "-D", c.dataDir, "-c", "port="+strconv.Itoa(port))
	cmd.Dir = c.dir
	cmd.Env = serverEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: as.cred,
		// Own process group: a Ctrl-C to the test must not reach the server
		// before Stop runs.
		Setpgid: true,
	}
	setParentDeathSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return false, fmt.Errorf("testpg: start %s%s: %w", c.bins.postgres, as.describe(), err)
	}
	c.cmd, c.port = cmd, port
	c.exited = make(chan struct{})
	go func(exited chan struct{}) {
		c.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}(c.exited)

	// Poll through our own unix socket: the TCP port might belong to another
	// server if ours failed to bind it.
	connStr := fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable connect_timeout=2",
		c.sockDir, port, Superuser)
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	var lastErr error
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attemptCtx, connStr)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return false, nil
		}
		lastErr = err
		select {
		case <-c.exited:
			log := c.logTail()
			retry = strings.Contains(log, "could not bind") ||
				strings.Contains(log, "could not create any TCP/IP sockets") ||
				strings.Contains(log, "ddress already in use")
			c.cmd = nil
			return retry, fmt.Errorf("testpg: %s exited during start (%v)%s; server log:\n%s",
				c.bins.postgres, c.waitErr, as.describe(), log)
		case <-ctx.Done():
			c.kill()
			return false, fmt.Errorf("testpg: postgres did not accept connections on port %d: %w (last error: %v); server log:\n%s",
				port, ctx.Err(), lastErr, c.logTail())
		case <-ticker.C:
		}
	}
}

// kill stops a running postmaster immediately and waits for it.
func (c *Cluster) kill() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
}

// logTail returns the end of the server log.
func (c *Cluster) logTail() string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	return tail(b, 4000)
}

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// Dir returns the temporary directory holding the data directory, the unix
// socket and the server log. Stop removes it.
func (c *Cluster) Dir() string { return c.dir }

// SocketDir returns the directory of the server's unix socket.
func (c *Cluster) SocketDir() string { return c.sockDir }

// LogPath returns the path of the file that receives the server's output.
func (c *Cluster) LogPath() string { return c.logPath }

// Version returns the server's major version, e.g. "15".
func (c *Cluster) Version() string { return c.version }

// URL returns the connection URL of database dbname as the superuser:
// postgres://postgres@127.0.0.1:PORT/DBNAME?sslmode=disable.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable",
		Superuser, c.port, escapePath(dbname))
}

// CreateDatabase creates the database name (an identifier, quoted as
// needed) and returns its URL.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	if err := createDatabase(ctx, c.URL("postgres"), name); err != nil {
		return "", err
	}
	return c.URL(name), nil
}

// DropDatabase drops the database name, terminating any sessions still
// connected to it (DROP DATABASE IF EXISTS ... WITH (FORCE)).
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	return dropDatabase(ctx, c.URL("postgres"), name)
}

// Stop shuts the server down (fast shutdown, SIGINT), waits for it to exit
// and removes its temporary directory. Calling it again returns the result
// of the first call.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	begin := time.Now()
	var errs []error
	if c.cmd != nil && c.cmd.Process != nil {
		select {
		case <-c.exited:
			errs = append(errs, fmt.Errorf("testpg: postgres had already exited (%v):\n%s", c.waitErr, c.logTail()))
		default:
			if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
				errs = append(errs, fmt.Errorf("testpg: signal postgres: %w", err))
			}
			select {
			case <-c.exited:
				if c.waitErr != nil {
					errs = append(errs, fmt.Errorf("testpg: postgres shutdown: %v:\n%s", c.waitErr, c.logTail()))
				}
			case <-time.After(stopTimeout):
				errs = append(errs, fmt.Errorf("testpg: postgres did not shut down within %s; killed it", stopTimeout))
				c.kill()
			}
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("testpg: remove %s: %w", c.dir, err))
	}
	c.logf("testpg: stopped PostgreSQL on port %d (%s)", c.port, time.Since(begin).Round(time.Millisecond))
	return errors.Join(errs...)
}

// createDatabase runs CREATE DATABASE name on the server adminURL points to.
func createDatabase(ctx context.Context, adminURL, name string) error {
	return adminExec(ctx, adminURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

// dropDatabase runs DROP DATABASE IF EXISTS name WITH (FORCE) on the server
// adminURL points to.
func dropDatabase(ctx context.Context, adminURL, name string) error {
	return adminExec(ctx, adminURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func adminExec(ctx context.Context, adminURL, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("testpg: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("testpg: %s: %w", sql, err)
	}
	return nil
}

// isDuplicateDatabase reports whether err is PostgreSQL's duplicate_database.
func isDuplicateDatabase(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DuplicateDatabase
}

// findBinaries locates initdb and postgres: on PATH first, then in
// /usr/lib/postgresql/*/bin, newest version first. tried lists the
// locations looked at, for error messages.
func findBinaries() (b binaries, tried []string, err error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	} else {
		tried = append(tried, "initdb on $PATH (not found)")
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool {
		return versionOf(matches[i]) > versionOf(matches[j])
	})
	dirs = append(dirs, matches...)
	for _, d := range dirs {
		initdb, postgres := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		tried = append(tried, initdb)
		if isExecutable(initdb) && isExecutable(postgres) {
			return binaries{initdb: initdb, postgres: postgres}, tried, nil
		}
	}
	// initdb on PATH without postgres next to it.
	if p, err := exec.LookPath("initdb"); err == nil {
		if q, err := exec.LookPath("postgres"); err == nil {
			return binaries{initdb: p, postgres: q}, tried, nil
		}
	}
	return b, tried, fmt.Errorf("testpg: no PostgreSQL server binaries (initdb, postgres) found; tried %s", strings.Join(tried, ", "))
}

// versionOf extracts the numeric version from /usr/lib/postgresql/VERSION/bin.
func versionOf(binDir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	if err != nil {
		return -1
	}
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// serverUser decides which operating system user runs initdb and postgres:
// the current user, or the "postgres" user when running as root.
func serverUser() (runAs, error) {
	if os.Geteuid() != 0 {
		return runAs{uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return runAs{}, fmt.Errorf("testpg: running as root, and PostgreSQL refuses to run as root, "+
			"but there is no \"postgres\" operating system user to run it as: %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return runAs{}, fmt.Errorf("testpg: user postgres: bad uid %q", u.Uid)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return runAs{}, fmt.Errorf("testpg: user postgres: bad gid %q", u.Gid)
	}
	return runAs{
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		uid:  uid,
		gid:  gid,
		name: "postgres",
	}, nil
}

func (a runAs) describe() string {
	if a.cred == nil {
		return ""
	}
	return fmt.Sprintf(" (run as OS user %s, uid %d)", a.name, a.uid)
}

// serverEnv is the environment of the server programs: ours without the
// libpq variables, which could redirect them, and with a C locale.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// pickPort chooses the port for a start attempt; tests replace it.
var pickPort = freePort

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// tail returns at most the last n bytes of b, as text.
func tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
		return "...\n" + string(b)
	}
	return string(b)
}

// sweepStale removes temporary directories left behind by test processes
// that died before they could stop their cluster (a panic, a timeout, a
// Ctrl-C). Only directories whose owner process and postmaster are both
// gone and that are older than a minute are touched. Best effort.
func sweepStale() {
	sweepStaleTemplateBuilds()
	matches, _ := filepath.Glob(filepath.Join(baseDir(), tempPrefix+"*"))
	for _, dir := range matches {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		owner, ok := readPid(filepath.Join(dir, "owner.pid"))
		if !ok || processAlive(owner) {
			continue
		}
		if pm, ok := readPid(filepath.Join(dir, "data", "postmaster.pid")); ok && processAlive(pm) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// readPid reads a pid from the first line of a file.
func readPid(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	return pid, err == nil && pid > 0
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// escapePath escapes a database name for use as a URL path segment.
func escapePath(name string) string {
	return url.PathEscape(name)
}
