package leadership

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

// TestOneLeaderAndRetake checks that a second elector cannot take the
// lock, that losing the lock connection stops the work before the lock is
// taken again, and that the work runs again once it is.
func TestOneLeaderAndRetake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, db := testsupport.Pool(t)
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "elector under test"
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	e := &Elector{Config: cfg, Schema: "trellis", Logger: logger}
	defer e.Close()
	ok, err := e.Acquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	other := &Elector{Config: cfg.Copy(), Schema: "trellis", Logger: logger}
	ok, err = other.Acquire(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "two electors hold the staging lock")
	other.Close()
	other.Close() // twice is safe

	started := make(chan struct{}, 4)
	stopped := make(chan struct{}, 4)
	var running atomic.Int32
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(rctx, func(ctx context.Context) {
			running.Add(1)
			started <- struct{}{}
			<-ctx.Done()
			running.Add(-1)
			stopped <- struct{}{}
		})
	}()
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal(what)
		}
	}
	wait(started, "the work did not start")

	var killed bool
	require.NoError(t, db.QueryRow(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'elector under test'").Scan(&killed))
	require.True(t, killed)
	wait(stopped, "the work went on after the lock connection was lost")
	wait(started, "the work did not run again after the lock was retaken")
	assert.Equal(t, int32(1), running.Load(), "two runs of the work at once")
	held, err := locks.Held(ctx, db, locks.StagingKey("trellis"))
	require.NoError(t, err)
	assert.True(t, held)

	stop()
	<-done
	e.Close()
	held, err = locks.Held(ctx, db, locks.StagingKey("trellis"))
	require.NoError(t, err)
	assert.False(t, held, "Close left the lock held")
}
