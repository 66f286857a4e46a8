// Package cli is the trellis command-line tool: one cobra command per
// operation, each a thin layer over the public trellis API. Commands write
// to the injected Env and return errors; only package main exits.
package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
)

// Exit codes of Run.
const (
	ExitOK    = 0
	ExitError = 1 // the command failed
	ExitUsage = 2 // the command line is wrong
	// ExitFound: a check ran and found a problem: self-check found the
	// target diverged, detect-disruptions found disrupted capture.
	ExitFound = 3
)

// Env is what the commands read from and write to. The zero value of a
// field means the process's own (os.Stdout, os.Stderr, os.Stdin,
// os.Getenv).
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	Stdin  io.Reader
	// Getenv reads an environment variable (DATABASE_URL).
	Getenv func(string) string

	pacing *pacing // the worker's, set by tests
}

func (e Env) withDefaults() Env {
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.Stderr == nil {
		e.Stderr = os.Stderr
	}
	if e.Stdin == nil {
		e.Stdin = os.Stdin
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	return e
}

// Run runs the command line args (without the program name) and returns the
// process's exit code: ExitOK, ExitError after printing "trellis: <message>"
// on Env.Stderr, or ExitUsage for a command line that is wrong. ctx ends the
// command early (main cancels it on SIGINT or SIGTERM).
func Run(ctx context.Context, args []string, env Env) int {
	env = env.withDefaults()
	root := NewRootCommand(env)
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(env.Stderr, "trellis: %s\n", message(err))
	var fe *foundError
	if errors.As(err, &fe) {
		return ExitFound
	}
	var ue *usageError
	if errors.As(err, &ue) {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	}
	return ExitError
}

// NewRootCommand builds the trellis command and its subcommands, writing to
// env. Execute it with SetArgs and ExecuteContext; Run does that and maps
// the error to an exit code.
func NewRootCommand(env Env) *cobra.Command {
	env = env.withDefaults()
	g := &globals{env: env}
	root := &cobra.Command{
		Use:   "trellis",
		Short: "Keep derived tables in PostgreSQL up to date from TRANSFORM statements",
		Long: `trellis keeps derived tables inside your own PostgreSQL up to date,
incrementally, from one-line TRANSFORM statements:

  trellis migrate
  trellis apply "TRANSFORM order_totals FROM orders SELECT price + tax AS total"
  trellis worker
  trellis status order_totals

Every command connects to --url (default: the DATABASE_URL environment
variable) and works on the Trellis instance whose catalog is --schema.

Exit status: 0 done; 1 the command failed (the message says why); 2 the
command line is wrong; 3 a check found a problem (self-check: the target
diverged; detect-disruptions: capture was disrupted, readers are paused).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				hint := ""
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					hint = " (did you mean " + strings.Join(s, " or ") + "?)"
				}
				return usageErrorf("unknown command %q%s", args[0], hint)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			_ = cmd.Help()
			return usageErrorf("a command is required")
		},
	}
	root.SuggestionsMinimumDistance = 2
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetIn(env.Stdin)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{msg: err.Error()}
	})
	root.CompletionOptions.HiddenDefaultCmd = false

	pf := root.PersistentFlags()
	pf.StringVar(&g.url, "url", "", "database URL (postgres://... or key=value); default: the DATABASE_URL environment variable")
	pf.StringVar(&g.schema, "schema", "trellis", "Trellis's catalog schema (the instance)")
	pf.StringVar(&g.targetSchema, "target-schema", "public", "schema where a bare target name is created")
	pf.StringVar(&g.logFormat, "log-format", "text", "log records as text or json (on standard error)")
	pf.StringVar(&g.logLevel, "log-level", "", "log level: debug, info, warn or error (default: info for worker, warn otherwise)")

	root.AddCommand(
		newMigrateCmd(g),
		newApplyCmd(g),
		newSyncCmd(g),
		newStatusCmd(g),
		newDefinitionsCmd(g),
		newBackfillCmd(g),
		newDetectDisruptionsCmd(g),
		newQuarantinedCmd(g),
		newSampleCmd(g),
		newPoisonedCmd(g),
		newReleaseKeyCmd(g),
		newSelfCheckCmd(g),
		newWorkerCmd(g),
		newDumpCmd(g),
		newDemoCmd(g),
		newVersionCmd(),
	)
	for _, add := range extraCommands {
		root.AddCommand(add(g))
	}
	// A command run before trellis migrate says to run it.
	for _, c := range root.Commands() {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error { return migrateHint(g, run(cmd, args)) }
		}
	}
	return root
}

// extraCommands are commands that files guarded by build constraints
// register from init (bench_cmd.go). It is only written during package
// initialisation.
var extraCommands []func(*globals) *cobra.Command

// globals are the flags every command shares, and the environment.
type globals struct {
	env          Env
	url          string
	schema       string
	targetSchema string
	logFormat    string
	logLevel     string
}

// databaseURL is --url, else DATABASE_URL; "" when neither is set.
func (g *globals) databaseURL() string {
	return cmp.Or(g.url, g.env.Getenv("DATABASE_URL"))
}

// requireURL is databaseURL, or a usage error when there is none.
func (g *globals) requireURL() (string, error) {
	u := g.databaseURL()
	if u == "" {
		return "", usageErrorf("no database: pass --url or set DATABASE_URL")
	}
	return u, nil
}

// logger logs to stderr in --log-format at --log-level, or at def when
// no level was given.
func (g *globals) logger(def slog.Level) (*slog.Logger, error) {
	level := def
	if g.logLevel != "" {
		if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
			return nil, usageErrorf("--log-level %q: use debug, info, warn or error", g.logLevel)
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch g.logFormat {
	case "", "text":
		return slog.New(slog.NewTextHandler(g.env.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(g.env.Stderr, opts)), nil
	}
	return nil, usageErrorf("--log-format %q: use text or json", g.logFormat)
}

// connect opens a client on the shared flags; opts supplies the rest. The
// caller closes it.
func (g *globals) connect(ctx context.Context, opts trellis.Options) (*trellis.Client, error) {
	u, err := g.requireURL()
	if err != nil {
		return nil, err
	}
	if _, err := pgconn.ParseConfig(u); err != nil {
		return nil, usageErrorf("the database URL (--url or DATABASE_URL) cannot be parsed: %v", err)
	}
	opts.URL, opts.Schema, opts.TargetSchema = u, g.schema, g.targetSchema
	if opts.Logger == nil {
		if opts.Logger, err = g.logger(slog.LevelWarn); err != nil {
			return nil, err
		}
	}
	return trellis.Connect(ctx, opts)
}

// bareTarget is how a "schema.table" target is best named to the user: the
// bare table when it lives in the target schema.
func (g *globals) bareTarget(qualified string) string {
	if schema, name, ok := strings.Cut(qualified, "."); ok && schema == g.targetSchema {
		return name
	}
	return qualified
}

// foundError is a check that ran and found a problem: Run exits with
// ExitFound.
type foundError struct{ msg string }

func (e *foundError) Error() string { return e.msg }

// usageError is a command line that is wrong: Run exits with ExitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// wrappedError prefixes a cause with what the CLI was doing, keeping the
// cause reachable for errors.As and trellis.CodeOf.
type wrappedError struct {
	msg    string
	err    error
	hinted bool // the message says to run trellis migrate
}

func (e *wrappedError) Error() string { return e.msg }
func (e *wrappedError) Unwrap() error { return e.err }

// message is an error's text for the "trellis: " line: a *trellis.Error
// already begins with that prefix, which is left out.
func message(err error) string {
	var te *trellis.Error
	if errors.As(err, &te) && error(te) == err {
		return te.Message
	}
	return err.Error()
}

// exactArgs is cobra.ExactArgs as a usage error.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("expected %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// noArgs refuses positional arguments with a usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q", args[0])
	}
	return nil
}
