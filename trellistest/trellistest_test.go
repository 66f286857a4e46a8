package trellistest_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/testsupport"
	"github.com/trellis-pg/trellis/trellistest"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

func TestResumeCaptureDisruptions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, db := testsupport.Pool(t)
	exec := func(sql string) {
		t.Helper()
		_, err := db.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	exec(`CREATE TABLE widgets (id int PRIMARY KEY, price int); CREATE TABLE gadgets (id int PRIMARY KEY, n int)`)
	exec(`INSERT INTO widgets SELECT g, g FROM generate_series(1, 50) g`)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TRELLIS_TEST_LOG") != "" {
		quiet = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	m, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, m.Migrate(ctx))
	m.Close()
	c, err := trellis.Connect(ctx, trellis.Options{URL: url, Logger: quiet, Staging: true, DrainWorkers: 1})
	require.NoError(t, err)
	defer c.Close()
	for _, s := range []string{
		"TRANSFORM widget_prices FROM widgets SELECT price * 2 AS doubled",
		"TRANSFORM widget_flags FROM widgets SELECT price > 25 AS big",
		"TRANSFORM widget_held FROM widgets SELECT price AS price",
		"TRANSFORM gadget_copy FROM gadgets SELECT n AS n",
	} {
		_, err := c.Define(ctx, s)
		require.NoError(t, err)
	}
	waitLive := func(target string) {
		require.Eventually(t, func() bool {
			st, err := c.Status(ctx, target)
			return err == nil && st.State == trellis.StateLive
		}, 30*time.Second, 10*time.Millisecond, target)
	}
	for _, tg := range []string{"widget_prices", "widget_flags", "widget_held", "gadget_copy"} {
		waitLive(tg)
	}
	_, err = c.Apply(ctx, "PAUSE TRANSFORM widget_held")
	require.NoError(t, err)

	// Nothing disrupted: nothing resumed.
	resumed, err := trellistest.ResumeCaptureDisruptions(ctx, c, 30*time.Second)
	require.NoError(t, err)
	require.Empty(t, resumed)

	// A fixture load with triggers disabled.
	exec(`ALTER TABLE widgets DISABLE TRIGGER ALL; INSERT INTO widgets SELECT g, g FROM generate_series(51, 80) g; DELETE FROM widgets WHERE id <= 5; ALTER TABLE widgets ENABLE TRIGGER ALL`)
	resumed, err = trellistest.ResumeCaptureDisruptions(ctx, c, 30*time.Second)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"public.widget_prices", "public.widget_flags"}, resumed)
	var missing int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM (SELECT id, price * 2 FROM widgets EXCEPT SELECT id, doubled FROM widget_prices) d`).Scan(&missing))
	require.Zero(t, missing)
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM widget_prices`).Scan(&n))
	require.Equal(t, 75, n)
	// The operator's pause stays.
	st, err := c.Status(ctx, "widget_held")
	require.NoError(t, err)
	require.Equal(t, trellis.StatePaused, st.State)

	// A source that is gone cannot be resumed: the refusal names it.
	exec(`DROP TABLE gadgets`)
	resumed, err = trellistest.ResumeCaptureDisruptions(ctx, c, 30*time.Second)
	var refused *trellistest.ResumeRefused
	require.True(t, errors.As(err, &refused), "error %v", err)
	require.Contains(t, refused.Refused, "public.gadget_copy")
	require.Empty(t, resumed)
}
