package dump

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/trellistype"
)

// Redos is how many times Structure dumps again when a definition changed
// while pg_dump ran, or pg_dump failed on a schema change made while it
// ran.
const Redos = 3

// FindBinary locates a PostgreSQL client program (pg_dump, psql): on PATH
// first, then in /usr/lib/postgresql/*/bin, newest version first.
func FindBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errs.New(trellistype.CodeNotFound, "%s is not on PATH nor in /usr/lib/postgresql/*/bin: install PostgreSQL's client programs (Debian/Ubuntu: apt-get install postgresql-client)", name)
}

// majorOf is the version in /usr/lib/postgresql/VERSION/bin.
func majorOf(binDir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	if err != nil {
		return -1
	}
	return v
}

// Options say how Structure dumps.
type Options struct {
	// PgDump is the pg_dump program to run.
	PgDump string
	// URL is the database, a postgres:// URL or a key=value string.
	URL string
	// Args are more pg_dump arguments (checked with CheckArgs).
	Args []string
	// Schema is the instance's catalog schema, which the dump must hold.
	Schema string
	// Definitions returns the definitions' SQL (Definitions, through the
	// public API); two calls return the same text unless a definition
	// changed in between.
	Definitions func(ctx context.Context) (string, error)
}

// Result is a finished dump.
type Result struct {
	// SQL is pg_dump's schema-only output followed by the definitions.
	SQL []byte
	// Attempts is how many times pg_dump ran: more than one when a define,
	// alter or drop committed while it ran, or a schema change made it
	// fail.
	Attempts int
}

// Structure runs pg_dump --schema-only and appends the definitions. It
// reads the definitions before and after each pg_dump run and dumps again,
// up to Redos times, while they differ, so the DDL in the file and the
// definitions appended to it agree. It also dumps again when pg_dump
// failed on a schema change that committed while it ran (see
// racedSchemaChange): the staging worker's first build of a new target
// drops and adds its key, and any session may change the schema. pg_dump
// 17 writes CREATE SCHEMA public when public is dumped by name; that
// becomes CREATE SCHEMA IF NOT EXISTS public, so the file loads into a
// database that has the schema.
func Structure(ctx context.Context, o Options) (Result, error) {
	if err := CheckArgs(o.Args); err != nil {
		return Result{}, err
	}
	before, err := o.Definitions(ctx)
	if err != nil {
		return Result{}, err
	}
	for attempt := 1; ; attempt++ {
		out, err := runPgDump(ctx, o)
		var failed *pgDumpFailure
		if errors.As(err, &failed) && racedSchemaChange(failed.stderr) {
			if attempt > Redos {
				return Result{}, errs.Wrap(trellistype.CodeConflict, err, "the schema changed while each of %d schema dumps ran: dump again once schema changes have stopped", attempt)
			}
			// Read the definitions again: the change may be a define.
			if before, err = o.Definitions(ctx); err != nil {
				return Result{}, err
			}
			continue
		}
		if err != nil {
			return Result{}, err
		}
		after, err := o.Definitions(ctx)
		if err != nil {
			return Result{}, err
		}
		if after == before {
			if !createsSchema(out, o.Schema) {
				return Result{}, errs.New(trellistype.CodeValidation, "the dump does not hold Trellis's catalog schema %q, so loading it could not restore the definitions: a dump that names its schemas (-n) must name %q too", o.Schema, o.Schema)
			}
			out = FixPublicSchema(out)
			if len(out) > 0 && out[len(out)-1] != '\n' {
				out = append(out, '\n')
			}
			return Result{SQL: append(out, after...), Attempts: attempt}, nil
		}
		if attempt > Redos {
			return Result{}, errs.New(trellistype.CodeConflict, "the definitions changed while each of %d schema dumps ran: dump again once defines, alters and drops have stopped", attempt)
		}
		before = after
	}
}

// runPgDump runs pg_dump --schema-only and returns what it wrote. A
// password in a URL goes to pg_dump through PGPASSWORD, not its command
// line.
func runPgDump(ctx context.Context, o Options) ([]byte, error) {
	conn, password := splitPassword(o.URL)
	args := append([]string{"--schema-only"}, o.Args...)
	args = append(args, "--dbname="+conn)
	cmd := exec.CommandContext(ctx, o.PgDump, args...)
	cmd.Env = os.Environ()
	if password != "" {
		cmd.Env = append(cmd.Env, "PGPASSWORD="+password)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		msg := strings.TrimSpace(stderr.String())
		var ee *exec.ExitError
		if errors.As(err, &ee) && msg != "" {
			return nil, &pgDumpFailure{program: filepath.Base(o.PgDump), stderr: msg}
		}
		return nil, fmt.Errorf("running %s: %w", o.PgDump, err)
	}
	return stdout.Bytes(), nil
}

// pgDumpFailure is pg_dump exiting with an error it wrote to stderr.
type pgDumpFailure struct {
	program string
	stderr  string
}

func (e *pgDumpFailure) Error() string { return e.program + " failed: " + e.stderr }

// racedSchemaChange reports whether pg_dump's error (its stderr) is one a
// schema change committed while it ran causes. pg_dump reads the catalog
// in one snapshot, but it locks the tables only after taking it, and the
// server's catalog lookups (pg_get_constraintdef looking up a key's index,
// opening a relation) see the latest catalog: an object dropped after the
// snapshot is listed and then not found. pg_dump reports no SQLSTATE, so
// its text is all there is to go by. The lookup errors it looks for are
// the server's internal errors, which are never translated; the "does not
// exist" of a table dropped before pg_dump locked it counts only in a
// query pg_dump ran ("query failed"), never when connecting.
func racedSchemaChange(stderr string) bool {
	switch {
	case strings.Contains(stderr, "cache lookup failed for "),
		strings.Contains(stderr, "could not open relation with OID "),
		strings.Contains(stderr, "query failed") && strings.Contains(stderr, "does not exist"):
		return true
	}
	return false
}

// splitPassword takes the password out of a postgres:// URL or a
// key=value connection string, so that it never reaches a command line.
func splitPassword(conn string) (string, string) {
	if !strings.HasPrefix(conn, "postgres://") && !strings.HasPrefix(conn, "postgresql://") {
		return splitKeywordPassword(conn)
	}
	u, err := url.Parse(conn)
	if err != nil {
		return conn, ""
	}
	var pw string
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			pw = p
			u.User = url.User(u.User.Username())
		}
	}
	// libpq also reads a password parameter, which wins over the user part.
	if q := u.Query(); q.Has("password") {
		pw = q.Get("password")
		q.Del("password")
		u.RawQuery = q.Encode()
	}
	if pw == "" {
		return conn, ""
	}
	return u.String(), pw
}

// splitKeywordPassword takes password=... out of a key=value connection
// string (values bare, or single-quoted with \\ and \' escapes, as libpq
// reads them).
func splitKeywordPassword(conn string) (string, string) {
	var kept []string
	var password string
	i := 0
	for i < len(conn) {
		for i < len(conn) && (conn[i] == ' ' || conn[i] == '\t' || conn[i] == '\n' || conn[i] == '\r') {
			i++
		}
		if i >= len(conn) {
			break
		}
		start := i
		for i < len(conn) && conn[i] != '=' && conn[i] != ' ' {
			i++
		}
		key := conn[start:i]
		for i < len(conn) && conn[i] == ' ' {
			i++
		}
		if i >= len(conn) || conn[i] != '=' {
			return conn, "" // not a key=value string pg_dump would read either
		}
		i++
		for i < len(conn) && conn[i] == ' ' {
			i++
		}
		var val strings.Builder
		if i < len(conn) && conn[i] == '\'' {
			i++
			for i < len(conn) && conn[i] != '\'' {
				if conn[i] == '\\' && i+1 < len(conn) {
					i++
				}
				val.WriteByte(conn[i])
				i++
			}
			i++ // the closing quote
		} else {
			for i < len(conn) && conn[i] != ' ' && conn[i] != '\t' && conn[i] != '\n' {
				if conn[i] == '\\' && i+1 < len(conn) {
					i++
				}
				val.WriteByte(conn[i])
				i++
			}
		}
		if key == "password" {
			password = val.String()
			continue
		}
		kept = append(kept, key+"='"+strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(val.String())+"'")
	}
	if password == "" {
		return conn, ""
	}
	return strings.Join(kept, " "), password
}

// createsSchema reports whether a plain-format dump creates schema (as
// pg_dump writes its name: bare when it can be, else quoted).
func createsSchema(dump []byte, schema string) bool {
	for _, name := range []string{schema, ident.Quote(schema)} {
		line := []byte("CREATE SCHEMA " + name + ";")
		for rest := dump; ; {
			i := bytes.Index(rest, line)
			if i < 0 {
				break
			}
			end := i + len(line)
			if (i == 0 || rest[i-1] == '\n') && (end == len(rest) || rest[end] == '\n' || rest[end] == '\r') {
				return true
			}
			rest = rest[end:]
		}
	}
	return false
}

// FixPublicSchema rewrites the lines that create schema public (pg_dump 17
// writes one when public is dumped by name) to create it only when it is
// missing: a database CREATE DATABASE made already has it.
func FixPublicSchema(dump []byte) []byte {
	lines := bytes.SplitAfter(dump, []byte("\n"))
	for i, l := range lines {
		body := bytes.TrimRight(l, "\r\n")
		if string(body) == "CREATE SCHEMA public;" || string(body) == `CREATE SCHEMA "public";` {
			lines[i] = append([]byte("CREATE SCHEMA IF NOT EXISTS public;"), l[len(body):]...)
		}
	}
	return bytes.Join(lines, nil)
}

// CheckArgs refuses the pg_dump arguments that would stop the dump from
// being a plain SQL script of the database's schema written to standard
// output: an output file or format, data only, another database. pg_dump
// accepts a long option by any unambiguous prefix, so prefixes are refused
// too.
func CheckArgs(args []string) error {
	refusedLong := []string{"file", "format", "data-only", "dbname"}
	// Short options that take a value, which ends the cluster.
	withValue := "defFhjnNpStTUZ"
	for _, a := range args {
		switch {
		case a == "--":
			return errs.New(trellistype.CodeValidation, "pg_dump argument %q: trellis dump passes the database itself", a)
		case strings.HasPrefix(a, "--"):
			name, _, _ := strings.Cut(a[2:], "=")
			for _, r := range refusedLong {
				if len(name) >= 2 && strings.HasPrefix(r, name) {
					return errs.New(trellistype.CodeValidation, "pg_dump argument %q: trellis dump writes a plain schema-only dump of --url's database (use -f for a file)", a)
				}
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for _, c := range a[1:] {
				if strings.ContainsRune("fFad", c) {
					return errs.New(trellistype.CodeValidation, "pg_dump argument %q: trellis dump writes a plain schema-only dump of --url's database (use -f for a file)", a)
				}
				if strings.ContainsRune(withValue, c) {
					break
				}
			}
		}
	}
	return nil
}
