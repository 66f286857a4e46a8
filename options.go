package trellis

import (
	"cmp"
	"log/slog"
	"time"
)

// CallTimeout bounds every call: past it the call returns a CodeTimeout
// error and the work it started on the server is cancelled and rolled back.
const CallTimeout = 30 * time.Second

// Options configure Connect. Only URL is required; every other field works
// from its zero value.
type Options struct {
	// URL is the database: a postgres:// URL or a libpq key=value string,
	// parsed by pgx as libpq would: what it leaves out is taken from the
	// PG* environment variables (PGHOST, PGPORT, PGUSER, PGPASSWORD,
	// PGDATABASE, PGSSLMODE, PGAPPNAME, ...), a password it lacks from the
	// password file (PGPASSFILE, default ~/.pgpass), and service=NAME from
	// the service file. TLS is configured in it (sslmode, sslrootcert, ...).
	// An application_name it sets (or PGAPPNAME) names the client's
	// connections in pg_stat_activity; without one they are "trellis", and
	// the workers' "trellis worker".
	URL string
	// Schema is the catalog schema Trellis keeps its own tables in. Default
	// "trellis". Not "public", not TargetSchema, not another instance's
	// catalog or target schema.
	Schema string
	// TargetSchema is where a bare target name is created. Default "public".
	TargetSchema string
	// Staging runs this client's staging worker (capture, builds, ledger
	// upkeep). Exactly one client per instance in a fleet sets it.
	Staging bool
	// DrainWorkers is the number of goroutines applying staged changes to
	// targets. Default 0.
	DrainWorkers int
	// MaxConns caps each of the client's connection pools. Default 20.
	MaxConns int32
	// Logger receives the client's logs. Default slog.Default().
	Logger *slog.Logger

	// PollInterval is how often an idle drain worker looks for new changes
	// (capture sends no notifications; see docs/decisions/0005). It bounds
	// the idle part of commit-to-target latency. Default 20ms.
	PollInterval time.Duration
}

func (o Options) withDefaults() Options {
	o.Schema = cmp.Or(o.Schema, "trellis")
	o.TargetSchema = cmp.Or(o.TargetSchema, "public")
	o.MaxConns = cmp.Or(o.MaxConns, 20)
	o.PollInterval = cmp.Or(o.PollInterval, 20*time.Millisecond)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.URL == "":
		return newError(CodeValidation, "Options.URL is required")
	case o.DrainWorkers < 0:
		return newError(CodeValidation, "Options.DrainWorkers must not be negative")
	case o.MaxConns < 2:
		return newError(CodeValidation, "Options.MaxConns must be at least 2")
	case o.PollInterval < time.Millisecond:
		return newError(CodeValidation, "Options.PollInterval must be at least 1ms")
	}
	return nil
}
