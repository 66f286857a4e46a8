// Package locks owns the advisory locks of a Trellis instance: how their
// keys derive from the catalog schema, and the named functions that take
// them (the DDL lock, the cut lock, the migration lock, the staging and
// drain liveness locks, the recompute key locks). It also owns the one way
// a transaction's lock_timeout is set.
//
// Advisory locks are per database, so every key derives from the catalog
// schema: two instances in one database never share a lock. The key
// values are fixed: processes of two releases running side by side during
// a deploy must take the same locks.
package locks

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs a statement: a pgx.Tx, *pgx.Conn or *pgxpool.Conn.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Querier reads a row: a pgx.Tx, *pgx.Conn, *pgxpool.Conn or *pgxpool.Pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Purposes of the instance-wide locks.
const (
	purposeDDL     = "ddl"
	purposeCut     = "cut"
	purposeMigrate = "migrate"
	purposeStaging = "staging"
	purposeDrain   = "drain"
	purposeSync    = "sync"
)

// key derives the bigint key of an instance-wide lock: 63 bits of the
// 64-bit FNV-1a hash of the schema and the purpose.
func key(schema, purpose string) int64 {
	h := fnv.New64a()
	h.Write([]byte("trellis\x00" + schema + "\x00" + purpose))
	return int64(h.Sum64() & 0x7fffffffffffffff)
}

// instanceHash is the 32-bit FNV-1a hash of the catalog schema that key
// locks and the names of capture objects carry.
func instanceHash(schema string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(schema))
	return h.Sum32()
}

// InstanceTag is the eight hex digits that make the names of an instance's
// capture triggers and NOTIFY channel its own.
func InstanceTag(schema string) string { return fmt.Sprintf("%08x", instanceHash(schema)) }

// DDLKey is the key of the instance's DDL lock, for a test that holds it
// from outside.
func DDLKey(schema string) int64 { return key(schema, purposeDDL) }

// StagingKey is the key the live staging worker holds; HeldBy reads it.
func StagingKey(schema string) int64 { return key(schema, purposeStaging) }

// DrainKey is the key every live drain worker holds shared.
func DrainKey(schema string) int64 { return key(schema, purposeDrain) }

// DDL takes the instance's DDL lock exclusively for the rest of tx: a
// definition change (a statement, a halt, a capture correction) waits for
// every page and build in flight and keeps new ones out.
func DDL(ctx context.Context, tx Execer, schema string) error {
	_, err := tx.Exec(ctx, sqlXactLock, key(schema, purposeDDL))
	return err
}

// DDLShared takes the DDL lock shared for the rest of tx: pages and builds
// run side by side, but never under a definition change.
func DDLShared(ctx context.Context, tx Execer, schema string) error {
	_, err := tx.Exec(ctx, sqlXactLockShared, key(schema, purposeDDL))
	return err
}

// Cut takes the ledger's cut lock for the rest of tx, waiting for a
// concurrent cutter.
func Cut(ctx context.Context, tx Execer, schema string) error {
	_, err := tx.Exec(ctx, sqlXactLock, key(schema, purposeCut))
	return err
}

// TryCut takes the cut lock for the rest of tx if it is free.
func TryCut(ctx context.Context, tx Querier, schema string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, sqlXactTryLock, key(schema, purposeCut)).Scan(&ok)
	return ok, err
}

// Migrate takes the session-level migration lock on conn, waiting for a
// migration in flight, and returns the function that releases it (under
// context.WithoutCancel, so a cancelled migration still unlocks).
func Migrate(ctx context.Context, conn Execer, schema string) (unlock func(), err error) {
	k := key(schema, purposeMigrate)
	if _, err := conn.Exec(ctx, sqlLock, k); err != nil {
		return nil, err
	}
	return func() { _, _ = conn.Exec(context.WithoutCancel(ctx), sqlUnlock, k) }, nil
}

// Sync takes the session-level sync lock on conn, waiting for a sync in
// flight, so that two syncs never plan and apply at once. It returns the
// function that releases it, which reports whether it could (a session
// that could not unlock must be closed, not pooled).
func Sync(ctx context.Context, conn Execer, schema string) (unlock func() error, err error) {
	k := key(schema, purposeSync)
	if _, err := conn.Exec(ctx, sqlLock, k); err != nil {
		return nil, err
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, err := conn.Exec(ctx, sqlUnlock, k)
		return err
	}, nil
}

// TryStaging takes the session-level staging lock on conn if no other
// session holds it: exactly one staging worker per instance runs.
func TryStaging(ctx context.Context, conn Querier, schema string) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, sqlTryLock, key(schema, purposeStaging)).Scan(&ok)
	return ok, err
}

// DrainLive takes the drain liveness lock shared on conn, for as long as
// the session lives: HeldBy(DrainKey) then says drain workers are live.
func DrainLive(ctx context.Context, conn Execer, schema string) error {
	_, err := conn.Exec(ctx, sqlLockShared, key(schema, purposeDrain))
	return err
}

// ReleaseAll releases every session-level advisory lock conn holds.
func ReleaseAll(ctx context.Context, conn Execer) error {
	_, err := conn.Exec(ctx, sqlUnlockAll)
	return err
}

// Held reports whether any session in the database holds the advisory
// lock k (one of the Key functions').
func Held(ctx context.Context, db Querier, k int64) (bool, error) {
	var held bool
	err := db.QueryRow(ctx, sqlHeld, int64(uint64(k)>>32), int64(uint32(k))).Scan(&held)
	return held, err
}

// Key is the key lock that serialises recomputes of one bucket of one
// transform's keys (drain pages, builds and self-checks alike): the
// instance's hash in the high 32 bits, then the transform and the bucket.
func Key(schema string, transformID, bucket int) int64 {
	return int64(instanceHash(schema)&0x7fffffff)<<32 | int64(transformID)<<8 | int64(bucket)
}

// Keys takes the key locks keys for the rest of tx, in sorted order in one
// statement so two holders of overlapping sets never deadlock, and then
// bounds the transaction's lock waits by lockTimeout (in the same
// statement, saving a round trip).
func Keys(ctx context.Context, tx Execer, keys []int64, lockTimeout time.Duration) error {
	_, err := tx.Exec(ctx, sqlKeyLocks, keys, timeoutSetting(lockTimeout))
	return err
}

// SetTimeout bounds every lock wait of the rest of tx by d
// (SET LOCAL lock_timeout).
func SetTimeout(ctx context.Context, tx Execer, d time.Duration) error {
	_, err := tx.Exec(ctx, sqlSetLockTimeout, timeoutSetting(d))
	return err
}

// timeoutSetting renders d as a lock_timeout value, in milliseconds.
func timeoutSetting(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// FunctionNoTimeout is the clause of a CREATE FUNCTION whose lock waits
// ignore the caller's lock_timeout: capture waits for the locks it takes
// (at most a reclaim's short attempt) rather than fail a writer's
// statement.
const FunctionNoTimeout = "SET lock_timeout = 0"
