package locks

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

// TestKeysAreStable pins the key values: processes of two releases running
// side by side take the same locks, so a derivation must never change.
func TestKeysAreStable(t *testing.T) {
	assert.Equal(t, int64(1516789442739329167), DDLKey("trellis"))
	assert.Equal(t, int64(807999440787974642), StagingKey("trellis"))
	assert.Equal(t, int64(7909483864376692117), DrainKey("trellis"))
	assert.Equal(t, int64(8925979043761751871), Key("trellis", 7, 63))
	assert.Equal(t, "fbdf72a6", InstanceTag("trellis"))
	assert.NotEqual(t, DDLKey("trellis"), DDLKey("other"), "instances share a lock")
	assert.NotEqual(t, Key("trellis", 7, 63), Key("other", 7, 63), "instances share a key lock")
}

func TestLocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, pool := testsupport.Pool(t)
	conn := func(t *testing.T) *pgxpool.Conn {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		t.Cleanup(c.Release)
		return c
	}

	t.Run("the DDL lock keeps pages out and lets them share", func(t *testing.T) {
		a, b := conn(t), conn(t)
		ta, err := a.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = ta.Rollback(ctx) }()
		require.NoError(t, DDLShared(ctx, ta, "trellis"))
		tb, err := b.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tb.Rollback(ctx) }()
		require.NoError(t, DDLShared(ctx, tb, "trellis"), "shared holders exclude each other")
		require.NoError(t, tb.Rollback(ctx))

		tb, err = b.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, SetTimeout(ctx, tb, 50*time.Millisecond))
		err = DDL(ctx, tb, "trellis")
		assert.True(t, pgerr.Is(err, pgerrcode.LockNotAvailable), "DDL under a shared holder: %v", err)
		require.NoError(t, tb.Rollback(ctx))

		// Another instance's DDL lock is another lock.
		tb, err = b.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, SetTimeout(ctx, tb, 50*time.Millisecond))
		require.NoError(t, DDL(ctx, tb, "other"))
		require.NoError(t, tb.Rollback(ctx))
	})

	t.Run("one staging worker; Held sees it until its locks are released", func(t *testing.T) {
		a, b := conn(t), conn(t)
		held, err := Held(ctx, pool, StagingKey("trellis"))
		require.NoError(t, err)
		assert.False(t, held)
		ok, err := TryStaging(ctx, a, "trellis")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = TryStaging(ctx, b, "trellis")
		require.NoError(t, err)
		assert.False(t, ok, "a second staging worker took the lock")
		held, err = Held(ctx, pool, StagingKey("trellis"))
		require.NoError(t, err)
		assert.True(t, held)
		require.NoError(t, ReleaseAll(ctx, a))
		held, err = Held(ctx, pool, StagingKey("trellis"))
		require.NoError(t, err)
		assert.False(t, held)
	})

	t.Run("drain workers hold their liveness lock shared", func(t *testing.T) {
		a, b := conn(t), conn(t)
		require.NoError(t, DrainLive(ctx, a, "trellis"))
		require.NoError(t, DrainLive(ctx, b, "trellis"))
		held, err := Held(ctx, pool, DrainKey("trellis"))
		require.NoError(t, err)
		assert.True(t, held)
		require.NoError(t, ReleaseAll(ctx, a))
		require.NoError(t, ReleaseAll(ctx, b))
		held, err = Held(ctx, pool, DrainKey("trellis"))
		require.NoError(t, err)
		assert.False(t, held)
	})

	t.Run("Keys sets the lock timeout and a held key lock waits", func(t *testing.T) {
		a, b := conn(t), conn(t)
		require.NoError(t, pgx.BeginFunc(ctx, a, func(ta pgx.Tx) error {
			require.NoError(t, Keys(ctx, ta, []int64{Key("trellis", 1, 2), Key("trellis", 1, 1)}, 10*time.Second))
			var setting string
			require.NoError(t, ta.QueryRow(ctx, "SELECT current_setting('lock_timeout')").Scan(&setting))
			assert.Equal(t, "10s", setting)
			tb, err := b.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tb.Rollback(ctx) }()
			require.NoError(t, SetTimeout(ctx, tb, 50*time.Millisecond))
			err = Keys(ctx, tb, []int64{Key("trellis", 1, 1)}, 50*time.Millisecond)
			assert.True(t, pgerr.Is(err, pgerrcode.LockNotAvailable), "a held key lock was taken twice: %v", err)
			return nil
		}))
	})

	t.Run("the migration lock is released by its unlock", func(t *testing.T) {
		a, b := conn(t), conn(t)
		unlock, err := Migrate(ctx, a, "trellis")
		require.NoError(t, err)
		tb, err := b.Begin(ctx)
		require.NoError(t, err)
		var ok bool
		require.NoError(t, tb.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", key("trellis", purposeMigrate)).Scan(&ok))
		assert.False(t, ok, "the migration lock was free while held")
		require.NoError(t, tb.Rollback(ctx))
		unlock()
		ok, err = TryCut(ctx, b, "trellis")
		require.NoError(t, err)
		assert.True(t, ok)
		require.NoError(t, b.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key("trellis", purposeMigrate)).Scan(&ok))
		assert.True(t, ok, "unlock left the migration lock held")
		require.NoError(t, ReleaseAll(ctx, b))
	})
}
