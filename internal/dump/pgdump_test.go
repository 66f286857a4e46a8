package dump

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/trellistype"
)

// fakePgDump writes a pg_dump stand-in that records its arguments and
// PGPASSWORD, counts its runs, and prints out (or fails with out on stderr
// when fail).
func fakePgDump(t *testing.T, out string, fail bool) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "out"), []byte(out), 0o644))
	status, stream := 0, ""
	if fail {
		status, stream = 1, " >&2"
	}
	script := fmt.Sprintf(`#!/bin/sh
d=%q
printf '%%s\n' "$@" > "$d/args"
printf '%%s' "$PGPASSWORD" > "$d/password"
echo run >> "$d/runs"
cat "$d/out"%s
exit %d
`, dir, stream, status)
	bin = filepath.Join(dir, "pg_dump")
	require.NoError(t, os.WriteFile(bin, []byte(script), 0o755))
	return bin, dir
}

func runs(t *testing.T, dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	require.NoError(t, err)
	return strings.Count(string(b), "run")
}

// definitions returns each text of seq in turn, then the last one again.
func definitions(seq ...string) func(context.Context) (string, error) {
	i := 0
	return func(context.Context) (string, error) {
		s := seq[min(i, len(seq)-1)]
		i++
		return s, nil
	}
}

const schemaDump = "SET check_function_bodies = false;\nCREATE SCHEMA public;\nCREATE SCHEMA trellis;\nCREATE TABLE public.t (id int);"

func TestStructureAppendsDefinitions(t *testing.T) {
	bin, dir := fakePgDump(t, schemaDump, false)
	res, err := Structure(context.Background(), Options{PgDump: bin, URL: "postgres://app:s3cret@db.example:5433/app?sslmode=disable",
		Args: []string{"--no-owner", "-n", "public", "-n", "trellis"}, Schema: "trellis", Definitions: definitions("-- defs\n")})
	require.NoError(t, err)
	require.Equal(t, 1, res.Attempts)
	require.Equal(t, "SET check_function_bodies = false;\nCREATE SCHEMA IF NOT EXISTS public;\nCREATE SCHEMA trellis;\nCREATE TABLE public.t (id int);\n-- defs\n", string(res.SQL))
	args, err := os.ReadFile(filepath.Join(dir, "args"))
	require.NoError(t, err)
	require.Equal(t, "--schema-only\n--no-owner\n-n\npublic\n-n\ntrellis\n--dbname=postgres://app@db.example:5433/app?sslmode=disable\n", string(args),
		"the password is not on pg_dump's command line")
	pw, err := os.ReadFile(filepath.Join(dir, "password"))
	require.NoError(t, err)
	require.Equal(t, "s3cret", string(pw))
}

func TestStructureRedoesWhileDefinitionsChange(t *testing.T) {
	bin, dir := fakePgDump(t, schemaDump, false)
	// Read before the first run, after it (changed: a define raced it), and
	// after the second run (unchanged).
	res, err := Structure(context.Background(), Options{PgDump: bin, URL: "dbname=app", Schema: "trellis", Definitions: definitions("one", "two", "two")})
	require.NoError(t, err)
	require.Equal(t, 2, res.Attempts)
	require.Equal(t, 2, runs(t, dir))
	require.True(t, strings.HasSuffix(string(res.SQL), "\ntwo"), "the definitions read after the dump that agrees with them")

	bin, dir = fakePgDump(t, schemaDump, false)
	n := 0
	_, err = Structure(context.Background(), Options{PgDump: bin, URL: "dbname=app", Schema: "trellis",
		Definitions: func(context.Context) (string, error) { n++; return fmt.Sprint(n), nil }})
	require.Equal(t, trellistype.CodeConflict, errs.CodeOf(err), "%v", err)
	require.Equal(t, 1+Redos, runs(t, dir), "a dump and up to three redos")
}

func TestStructureRefusesADumpWithoutTheCatalog(t *testing.T) {
	bin, _ := fakePgDump(t, "CREATE SCHEMA public;\nCREATE TABLE public.t (id int);\n-- CREATE SCHEMA trellis;\n", false)
	_, err := Structure(context.Background(), Options{PgDump: bin, URL: "dbname=app", Args: []string{"-n", "public"}, Schema: "trellis", Definitions: definitions("x")})
	require.Equal(t, trellistype.CodeValidation, errs.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), `must name "trellis" too`)

	// pg_dump quotes a name that needs it.
	bin, _ = fakePgDump(t, "CREATE SCHEMA \"Trellis Cat\";\n", false)
	_, err = Structure(context.Background(), Options{PgDump: bin, URL: "dbname=app", Schema: "Trellis Cat", Definitions: definitions("x")})
	require.NoError(t, err)
}

func TestStructureReportsPgDumpsError(t *testing.T) {
	bin, _ := fakePgDump(t, "pg_dump: error: connection to server failed: FATAL:  database \"nope\" does not exist\n", true)
	_, err := Structure(context.Background(), Options{PgDump: bin, URL: "dbname=nope", Schema: "trellis", Definitions: definitions("x")})
	require.Error(t, err)
	require.Contains(t, err.Error(), `database "nope" does not exist`)
}

func TestCheckArgs(t *testing.T) {
	for _, ok := range [][]string{nil, {"--no-owner", "-x"}, {"-n", "public", "-N", "audit"}, {"-Oxn", "fancy"}, {"--filter=f.txt"}, {"--exclude-table-data=x"}} {
		require.NoError(t, CheckArgs(ok), "%q", ok)
	}
	for _, bad := range [][]string{{"-f", "out.sql"}, {"-fout.sql"}, {"-Ox", "-Fc"}, {"-a"}, {"--data-only"}, {"--data"}, {"--file=x"},
		{"--format", "custom"}, {"--form=c"}, {"-d", "other"}, {"--dbname=other"}, {"--"}} {
		err := CheckArgs(bad)
		require.Equal(t, trellistype.CodeValidation, errs.CodeOf(err), "%q", bad)
	}
}

func TestFixPublicSchema(t *testing.T) {
	for in, want := range map[string]string{
		"CREATE SCHEMA public;\n":                   "CREATE SCHEMA IF NOT EXISTS public;\n",
		"SET x;\r\nCREATE SCHEMA \"public\";\r\nY":  "SET x;\r\nCREATE SCHEMA IF NOT EXISTS public;\r\nY",
		"CREATE SCHEMA public;":                     "CREATE SCHEMA IF NOT EXISTS public;",
		"CREATE SCHEMA publicity;\n":                "CREATE SCHEMA publicity;\n",
		"-- CREATE SCHEMA public;\n":                "-- CREATE SCHEMA public;\n",
		"COMMENT ON SCHEMA public IS 'standard';\n": "COMMENT ON SCHEMA public IS 'standard';\n",
		"CREATE SCHEMA IF NOT EXISTS public;\nx\n":  "CREATE SCHEMA IF NOT EXISTS public;\nx\n",
	} {
		require.Equal(t, want, string(FixPublicSchema([]byte(in))), "%q", in)
	}
}

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pg_dump"), []byte("#!/bin/sh\n"), 0o755))
	t.Setenv("PATH", dir)
	p, err := FindBinary("pg_dump")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "pg_dump"), p, "PATH first")
	_, err = FindBinary("no_such_program_here")
	require.Equal(t, trellistype.CodeNotFound, errs.CodeOf(err))
}

// A password written anywhere in the connection string (the URL's user
// part, its password parameter, or a key=value string's password, quoted
// or not) reaches pg_dump through PGPASSWORD, never its command line.
func TestStructureKeepsEveryPasswordOffTheCommandLine(t *testing.T) {
	for _, tc := range []struct{ url, pw string }{
		{"postgres://app:s3cret@db.example/app", "s3cret"},
		{"postgres://app@db.example/app?sslmode=disable&password=s3cret", "s3cret"},
		{"postgresql:///app?host=/tmp&password=s3%20cret&user=app", "s3 cret"},
		{"host=db.example user=app password=s3cret dbname=app", "s3cret"},
		{"host=db.example password = 'it\\'s s3cret' dbname=app", "it's s3cret"},
	} {
		bin, dir := fakePgDump(t, schemaDump, false)
		_, err := Structure(context.Background(), Options{PgDump: bin, URL: tc.url, Schema: "trellis", Definitions: definitions("-- defs\n")})
		require.NoError(t, err, tc.url)
		args, err := os.ReadFile(filepath.Join(dir, "args"))
		require.NoError(t, err)
		require.NotContains(t, string(args), "cret", "%s: the password is on pg_dump's command line: %s", tc.url, args)
		pw, err := os.ReadFile(filepath.Join(dir, "password"))
		require.NoError(t, err)
		require.Equal(t, tc.pw, string(pw), tc.url)
	}
}
