package trellis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// requireUTCMicro fails unless t is in time.UTC to the microsecond, as
// every time the API returns is.
func requireUTCMicro(t *testing.T, at time.Time, what string) {
	t.Helper()
	require.False(t, at.IsZero(), what)
	require.Same(t, time.UTC, at.Location(), what)
	require.Zero(t, at.Nanosecond()%1000, what)
}

func TestTimesComeOutInUTCToTheMicrosecond(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src VALUES (1, 1), (2, 0)`)
	// The session's time zone is not UTC: what the API returns still is.
	e.exec(`ALTER DATABASE ` + e.rows(`SELECT quote_ident(current_database())`)[0][0] + ` SET TimeZone = 'Asia/Kathmandu'`)
	c := e.engine()
	_, err := c.Define(e.ctx, `TRANSFORM r FROM src SELECT 10 / v AS q`)
	require.NoError(t, err)
	e.waitState(c, "r", trellis.StateLive)
	_, err = c.Apply(e.ctx, "PAUSE TRANSFORM r")
	require.NoError(t, err)

	st, err := c.Status(e.ctx, "r")
	require.NoError(t, err)
	requireUTCMicro(t, st.Since, "Status.Since")
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Len(t, defs, 1)
	requireUTCMicro(t, defs[0].Since, "DefinitionSummary.Since")
	requireUTCMicro(t, defs[0].CreatedAt, "DefinitionSummary.CreatedAt")
	q, err := c.QuarantineStatus(e.ctx, "r")
	require.NoError(t, err)
	requireUTCMicro(t, q.Since, "QuarantineEntry.Since")
	col, err := c.QuarantineStatus(e.ctx, "r.q") // 10 / 0 quarantined it
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, col.State)
	requireUTCMicro(t, col.Since, "a column's QuarantineEntry.Since")
}

func TestApplicationNameFromTheURLIsKept(t *testing.T) {
	t.Parallel()
	e := setup(t)
	count := func(name string) string {
		return e.rows(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, name)[0][0]
	}
	sep := "?"
	if strings.Contains(e.url, "?") {
		sep = "&" // the test server's URL may carry parameters (TRELLIS_TEST_DATABASE_URL's may not)
	}
	c, err := trellis.Connect(e.ctx, trellis.Options{URL: e.url + sep + "application_name=billing-api", Logger: quietLogger()})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Migrate(e.ctx))
	require.NotEqual(t, "0", count("billing-api"), "the URL's application_name names the client's connections")
	require.Equal(t, "0", count("trellis"))
	c.Close()

	d := e.connect(trellis.Options{})
	_, err = d.Definitions(e.ctx)
	require.NoError(t, err)
	require.NotEqual(t, "0", count("trellis"), "without one in the URL, the connections are trellis's")
}

func TestErrorUnwrapsItsCause(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	c := e.engine()

	// A PostgreSQL error about the statement's SQL.
	_, err := c.Define(e.ctx, `TRANSFORM r FROM src SELECT v + 'x' AS x`)
	requireCode(t, err, trellis.CodeValidation)
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, "22P02", pe.Code)

	// A call the caller's context ends.
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	_, err = c.Status(ctx, "r")
	requireCode(t, err, trellis.CodeTimeout)
	require.ErrorIs(t, err, context.Canceled)

	// A call past its deadline, while the server is busy on it.
	e.exec(`CREATE TABLE other (id int PRIMARY KEY)`)
	tx, err := e.db.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(e.ctx, `LOCK TABLE src IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	ctx, cancel = context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Define(ctx, `TRANSFORM r2 FROM src SELECT v AS v`)
	requireCode(t, err, trellis.CodeTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
