package dump

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/testsupport"
	"github.com/trellis-pg/trellis/trellistype"
)

// A schema change that commits while pg_dump runs makes pg_dump fail: its
// snapshot still has the old objects, which the server no longer has. A
// primary key dropped and added again (as the staging worker's one-shot
// initial build does to a new target) fails with "cache lookup failed for
// index"; a table dropped before pg_dump locks it, with "does not exist".
// The race is forced: the change holds the table's lock until pg_dump,
// having taken its snapshot, waits for it. Structure dumps again, and the
// file has the schema as it is after the change.
func TestStructureRedoesWhenTheSchemaChangesUnderPgDump(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, change string
		has, lacks   string
	}{
		{"key replaced", `ALTER TABLE public.t DROP CONSTRAINT t_old_key; ALTER TABLE public.t ADD CONSTRAINT t_new_key PRIMARY KEY (id)`,
			"t_new_key", "t_old_key"},
		{"table dropped", `DROP TABLE public.t`, "CREATE SCHEMA trellis", "CREATE TABLE public.t"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			url := testsupport.Database(t)
			db, err := pgxpool.New(ctx, url)
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Exec(ctx, `CREATE SCHEMA trellis; CREATE TABLE public.t (id int CONSTRAINT t_old_key PRIMARY KEY, v int)`)
			require.NoError(t, err)
			bin, err := FindBinary("pg_dump")
			require.NoError(t, err)

			tx, err := db.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			_, err = tx.Exec(ctx, c.change)
			require.NoError(t, err)

			type result struct {
				res Result
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := Structure(ctx, Options{PgDump: bin, URL: url, Schema: "trellis", Definitions: definitions("-- defs\n")})
				done <- result{res, err}
			}()
			// pg_dump has its snapshot once it waits for the table's lock.
			waiting := false
			for !waiting {
				require.NoError(t, db.QueryRow(ctx, `
SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE a.application_name = 'pg_dump' AND NOT l.granted AND l.relation = 'public.t'::regclass)`).Scan(&waiting))
				select {
				case r := <-done:
					t.Fatalf("pg_dump finished without waiting for the lock: %+v", r)
				case <-time.After(5 * time.Millisecond):
				}
			}
			require.NoError(t, tx.Commit(ctx))

			r := <-done
			require.NoError(t, r.err)
			require.Equal(t, 2, r.res.Attempts, "the failed run is redone")
			require.Contains(t, string(r.res.SQL), c.has)
			require.NotContains(t, string(r.res.SQL), c.lacks)
			require.Contains(t, string(r.res.SQL), "-- defs\n")
		})
	}
}

// A pg_dump that fails on a racing schema change every time is run Redos
// more times, then the error is a conflict that says why; any other
// failure (here: connecting) is reported after one run.
func TestStructureGivesUpOnARacingSchemaChange(t *testing.T) {
	bin, dir := fakePgDump(t, "pg_dump: error: query failed: ERROR:  cache lookup failed for index 29758\n", true)
	_, err := Structure(context.Background(), Options{PgDump: bin, URL: "dbname=app", Schema: "trellis", Definitions: definitions("x")})
	require.Equal(t, trellistype.CodeConflict, errs.CodeOf(err))
	require.Contains(t, err.Error(), "the schema changed while each of 4 schema dumps ran")
	require.Contains(t, err.Error(), "cache lookup failed for index 29758")
	require.Equal(t, 1+Redos, runs(t, dir))

	bin, dir = fakePgDump(t, "pg_dump: error: connection to server on socket \"/tmp/.s.PGSQL.5432\" failed: FATAL:  database \"nope\" does not exist\n", true)
	_, err = Structure(context.Background(), Options{PgDump: bin, URL: "dbname=nope", Schema: "trellis", Definitions: definitions("x")})
	require.Contains(t, err.Error(), `database "nope" does not exist`)
	require.Equal(t, 1, runs(t, dir))
}
