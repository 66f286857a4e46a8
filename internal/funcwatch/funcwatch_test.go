package funcwatch_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/funcwatch"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

// Probe finds the user functions a query calls directly, through an
// operator and as an aggregate's support functions, leaves built-ins out,
// and leaves nothing behind.
func TestProbe(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, db := testsupport.Pool(t)
	for _, q := range []string{
		`CREATE TABLE o (id int PRIMARY KEY, price numeric)`,
		`CREATE FUNCTION tax(p numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT p * 0.1'`,
		`CREATE FUNCTION add2(a numeric, b numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT a + b'`,
		`CREATE OPERATOR ## (LEFTARG = numeric, RIGHTARG = numeric, FUNCTION = add2)`,
		`CREATE FUNCTION keep_max(s numeric, v numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS 'SELECT greatest(s, v)'`,
		`CREATE AGGREGATE top(numeric) (SFUNC = keep_max, STYPE = numeric)`,
	} {
		_, err := db.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	probe := func(query string) []string {
		t.Helper()
		var sigs []string
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			fns, err := funcwatch.Probe(ctx, tx, query)
			for _, f := range fns {
				require.NotZero(t, f.OID)
				require.Len(t, f.Fingerprint, 32)
				sigs = append(sigs, f.Signature)
			}
			return err
		})
		require.NoError(t, err)
		return sigs
	}
	require.Equal(t, []string{"add2(numeric,numeric)", "tax(numeric)"},
		probe(`SELECT o.id, tax(o.price) AS t, o.price ## 1 AS u, lower('X') AS l FROM o WHERE abs(o.price) > 0`))
	require.Equal(t, []string{"keep_max(numeric,numeric)", "top(numeric)"},
		probe(`SELECT o.id, top(o.price) AS t, sum(o.price) AS s FROM o GROUP BY o.id`))
	require.Empty(t, probe(`SELECT o.id, o.price * 2 AS p FROM o`))

	// A query that does not run is an error, and the transaction goes on.
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		_, err := funcwatch.Probe(ctx, tx, `SELECT nope(o.price) AS x FROM o`)
		require.Error(t, err)
		_, err = tx.Exec(ctx, `SELECT 1`)
		return err
	})
	require.NoError(t, err)
	var views int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = 'trellis_probe'`).Scan(&views))
	require.Zero(t, views)
}
