package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/dump"
)

func newDumpCmd(g *globals) *cobra.Command {
	var file, pgDump, appendTo string
	cmd := &cobra.Command{
		Use:   "dump [-f FILE] [--pg-dump PATH] [-- PG_DUMP_ARGS...]",
		Short: "Write a schema-only dump that loads with the transforms defined",
		Long: `dump runs pg_dump --schema-only on the database and appends the
instance's definitions, so a database loaded from the file (psql -f FILE)
has its transforms, not only their empty target tables. Every transform
loads defined and not built, also one that was paused or quarantined; the
staging worker that starts on the loaded database reinstalls capture and
builds the targets.

The definitions are read before and after pg_dump runs; when a define,
alter or drop committed in between, the dump is redone (up to 3 times), so
the file's tables and definitions agree. A CREATE SCHEMA public line
(pg_dump 17 writes one when public is dumped by name) is written as
CREATE SCHEMA IF NOT EXISTS public.

pg_dump is looked for on PATH, then in /usr/lib/postgresql/*/bin (newest
first), unless --pg-dump names it. Arguments after -- go to pg_dump; a dump
that names its schemas (-n) must name the catalog schema too. The file is
written only once the dump succeeded; without -f the dump goes to
standard output.

With --append FILE, no pg_dump runs: the definitions are appended to FILE,
a schema dump another tool wrote (rails db:schema:dump with
structure.sql, Django's or Ecto's structure dump, Atlas). The definitions
are read once, so a define racing that tool's dump is not seen: run it
after the dump, in the same deploy step.`,
		Example: `  trellis dump -f structure.sql
  trellis dump -f structure.sql -- --no-owner -n public -n trellis
  trellis dump --append db/structure.sql
  psql -v ON_ERROR_STOP=1 --single-transaction -d postgres://localhost/app_test -f structure.sql`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return usageErrorf("unexpected argument %q (pg_dump arguments go after --)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if appendTo != "" {
				if file != "" || len(args) > 0 || pgDump != "" {
					return usageErrorf("--append runs no pg_dump: give it alone, without -f, --pg-dump or pg_dump arguments")
				}
				return appendDefinitions(cmd, g, appendTo)
			}
			if err := dump.CheckArgs(args); err != nil {
				return usageErrorf("%s", message(err))
			}
			u, err := g.requireURL()
			if err != nil {
				return err
			}
			bin := pgDump
			if bin == "" {
				if bin, err = dump.FindBinary("pg_dump"); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := dump.Structure(ctx, dump.Options{PgDump: bin, URL: u, Args: args, Schema: g.schema, Definitions: c.DumpDefinitionsSQL})
			if err != nil {
				return err
			}
			if res.Attempts > 1 {
				fmt.Fprintf(g.env.Stderr, "the definitions or the schema changed while pg_dump ran: dumped %d times\n", res.Attempts)
			}
			if file == "" {
				_, err := cmd.OutOrStdout().Write(res.SQL)
				return err
			}
			if err := writeFileAtomic(file, res.SQL); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema and definitions (schema %s) dumped to %s\n", g.schema, file)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "write the dump to `FILE` (default: standard output)")
	f.StringVar(&appendTo, "append", "", "append the definitions to `FILE`, a structure dump another tool wrote (no pg_dump runs)")
	f.StringVar(&pgDump, "pg-dump", "", "the pg_dump program to run (default: found on PATH or in /usr/lib/postgresql/*/bin)")
	return cmd
}

// writeFileAtomic replaces name with data: written to a file beside it,
// then renamed over it, so a failure never leaves half a dump.
func writeFileAtomic(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	// A schema dump tells a lot about the database: only its owner reads it.
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// appendDefinitions appends the instance's definitions to a structure
// file another tool dumped.
func appendDefinitions(cmd *cobra.Command, g *globals, name string) error {
	ctx := cmd.Context()
	if _, err := os.Stat(name); err != nil {
		return fmt.Errorf("--append: %w (the file must exist: dump the schema first)", err)
	}
	c, err := g.connect(ctx, trellis.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	defs, err := c.DumpDefinitionsSQL(ctx)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString("\n" + defs)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("appending to %s: %w", name, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "definitions (schema %s) appended to %s\n", g.schema, name)
	return nil
}
