package trellistype

import (
	"encoding/json"
	"reflect"
	"time"
)

// State is where a transform is in its lifecycle.
type State string

// The lifecycle states.
const (
	// StateWaitingToBackfill: defined, its target created, not built yet.
	StateWaitingToBackfill State = "waiting_to_backfill"
	// StateBackfilling: the target is being filled (or re-derived) from its source.
	StateBackfilling State = "backfilling"
	// StateLive: built, and its sources' changes are applied as they commit
	// (Status.PendingChanges counts those still on their way).
	StateLive State = "live"
	// StateCatchingUp: live, but an upstream column it reads is paused.
	StateCatchingUp State = "catching_up"
	// StatePaused: nothing is applied until RESUME; the reason is in the status.
	StatePaused State = "paused"
)

// Status is the state of one transform, as Client.Status reports it.
type Status struct {
	// Target is the qualified target table, "schema.table".
	Target string `json:"target"`
	State  State  `json:"state"`
	// Since is when the transform entered State.
	Since time.Time `json:"since"`
	// Statement is the definition as it was applied.
	Statement string `json:"statement"`
	// Sources are the qualified tables the transform reads (the FROM
	// table, then a joined one).
	Sources []string `json:"sources"`
	// Views are the qualified views the definition reads; their
	// queries were inlined, so their base tables are among Sources.
	Views []string `json:"views"`
	// PausedReason says why a paused transform is paused ("" otherwise;
	// null in JSON).
	PausedReason string `json:"paused_reason"`
	// BackfillingColumns are columns added by ALTER TRANSFORM that are still
	// being filled.
	BackfillingColumns []string `json:"backfilling_columns"`
	// BuildRows is how many rows the current (or last) build has written.
	BuildRows int64 `json:"build_rows"`
	// BuildTotal estimates the rows a build reads, from PostgreSQL's
	// statistics of the FROM table (partitions included) while the
	// transform waits to be built or is being built; 0 when there is no
	// estimate (a table never analyzed) or no build. A WHERE or a GROUP BY
	// makes the target smaller than it.
	BuildTotal int64 `json:"build_total"`
	// PendingChanges counts the committed, captured changes of its sources
	// (for a chain, also of the sources upstream of it) not yet applied to
	// the target; 0 when the target is caught up. Changes held in
	// quarantine are counted in HeldKeys instead.
	PendingChanges int64 `json:"pending_changes"`
	// Lag is how long the oldest pending change has waited, at most (the
	// estimate is as fine as the ledger's cuts, a few seconds at worst
	// while a staging worker runs); 0 when PendingChanges is 0. In JSON,
	// lag_seconds.
	Lag time.Duration `json:"-"`

	HeldKeys              *HeldKeys        `json:"held_keys"`
	DrainFailure          *DrainFailure    `json:"drain_failure"`
	PausedUpstreamColumns []string         `json:"paused_upstream_columns"`
	SourceIndexGaps       []SourceIndexGap `json:"source_index_gaps"`
	Correcting            []CorrectingNode `json:"correcting"`
	CaptureFailure        *CaptureFailure  `json:"capture_failure"`
	CaptureWait           *CaptureWait     `json:"capture_wait"`
	BackfillFailure       *BackfillFailure `json:"backfill_failure"`
}

// MarshalJSON prints lists as arrays, an empty PausedReason as null and
// Lag as lag_seconds.
func (s Status) MarshalJSON() ([]byte, error) {
	type plain Status
	return json.Marshal(struct {
		plain
		PausedReason *string `json:"paused_reason"`
		LagSeconds   float64 `json:"lag_seconds"`
	}{arrays(plain(s)), nonEmpty(s.PausedReason), s.Lag.Seconds()})
}

// HeldKeys are the source keys a transform holds in quarantine.
type HeldKeys struct {
	Count            int64     `json:"count"`
	OldestPoisonedAt time.Time `json:"oldest_poisoned_at"`
}

// DrainFailure is a page of changes that keeps failing with nothing to blame
// on a row: it is retried with backoff and disappears once it succeeds.
type DrainFailure struct {
	// SegSeq identifies the failing page.
	SegSeq int64 `json:"seg_seq"`
	// Tables are the qualified source tables the page holds changes of.
	Tables []string `json:"tables"`
	Error  string   `json:"error"`
	// SQLState is the PostgreSQL error code, nil when the error did not come
	// from PostgreSQL.
	SQLState *string   `json:"sqlstate"`
	Since    time.Time `json:"since"`
	LastSeen time.Time `json:"last_seen"`
	Attempts int       `json:"attempts"`
}

// MarshalJSON prints Tables as an array.
func (d DrainFailure) MarshalJSON() ([]byte, error) {
	type plain DrainFailure
	return json.Marshal(arrays(plain(d)))
}

// CaptureFailureKind says what kind of capture failure a transform has.
type CaptureFailureKind string

// Capture failure kinds.
const (
	CaptureFailureCapture    CaptureFailureKind = "capture"
	CaptureFailureHalt       CaptureFailureKind = "halt"
	CaptureFailureDisruption CaptureFailureKind = "disruption"
)

// CaptureFailure says why capture of a source is broken, or why applying
// halted on a transform.
type CaptureFailure struct {
	Kind        CaptureFailureKind `json:"kind"`
	SourceTable string             `json:"source_table"`
	Error       string             `json:"error"`
	// Columns are the columns it is about; empty (never nil) when it is
	// about none.
	Columns    []string  `json:"columns"`
	DetectedAt time.Time `json:"detected_at"`
}

// MarshalJSON prints Columns as an array.
func (f CaptureFailure) MarshalJSON() ([]byte, error) {
	type plain CaptureFailure
	return json.Marshal(arrays(plain(f)))
}

// CaptureWait is a capture install, widen or uninstall waiting on a lock
// that other sessions hold or queue for.
type CaptureWait struct {
	Operation string    `json:"operation"`
	Table     string    `json:"table"`
	LockMode  string    `json:"lock_mode"`
	Blockers  []string  `json:"blockers"`
	Since     time.Time `json:"since"`
}

// MarshalJSON prints Blockers as an array.
func (w CaptureWait) MarshalJSON() ([]byte, error) {
	type plain CaptureWait
	return json.Marshal(arrays(plain(w)))
}

// BackfillFailure is a build that keeps failing.
type BackfillFailure struct {
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"last_error"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
}

// CorrectingNode is a partition of a partitioned source a transform is being
// corrected for.
type CorrectingNode struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
	// KeysRemaining is how many keys are left to re-derive; nil until
	// the correction has counted them.
	KeysRemaining *int64 `json:"keys_remaining"`
}

// IndexRole is the part of a definition a source index serves.
type IndexRole string

// Index roles.
const (
	RoleGroupBy    IndexRole = "group_by"
	RoleJoinFrom   IndexRole = "join_from"
	RoleJoinJoined IndexRole = "join_joined"
	// RolePartitionBy serves a window's PARTITION BY (also top-k per
	// group and DISTINCT ON): a change recomputes its partitions.
	RolePartitionBy IndexRole = "partition_by"
	// RoleOrderBy serves a global top-k's ORDER BY (ORDER BY ... LIMIT
	// k over one table): its recompute reads the first k rows in that
	// order, which an index of the same order (or its reverse) gives.
	RoleOrderBy IndexRole = "order_by"
)

// SourceIndexGap is a source index a GROUP BY or JOIN target needs and lacks.
type SourceIndexGap struct {
	Table    string    `json:"table"`
	Columns  []string  `json:"columns"`
	Role     IndexRole `json:"role"`
	OptedOut bool      `json:"opted_out"`
	// Fix is the CREATE INDEX statement that closes the gap, as
	// PostgreSQL accepts it for the table; "" when no index can serve
	// (NoFix says why).
	Fix string `json:"fix"`
	// NoFix says why no index can serve the gap (an expression that is not
	// IMMUTABLE, say); "" when Fix is set.
	NoFix string `json:"no_fix,omitempty"`
}

// MarshalJSON prints Columns as an array.
func (g SourceIndexGap) MarshalJSON() ([]byte, error) {
	type plain SourceIndexGap
	return json.Marshal(arrays(plain(g)))
}

// DefinitionSummary is one registered transform, as Client.Definitions lists it.
type DefinitionSummary struct {
	// Target is the qualified target table.
	Target    string    `json:"target"`
	Statement string    `json:"statement"`
	State     State     `json:"state"`
	Since     time.Time `json:"since"`
	// Sources are the qualified source tables it reads.
	Sources []string `json:"sources"`
	// Views are the qualified views it reads (their tables are Sources).
	Views     []string  `json:"views"`
	CreatedAt time.Time `json:"created_at"`
}

// MarshalJSON prints Sources as an array.
func (d DefinitionSummary) MarshalJSON() ([]byte, error) {
	type plain DefinitionSummary
	return json.Marshal(arrays(plain(d)))
}

// Config is the configuration a client connected with.
type Config struct {
	Schema       string `json:"schema"`
	TargetSchema string `json:"target_schema"`
	// MaxConns is the cap of the client's connection pool.
	MaxConns int32 `json:"max_conns"`
	// AcquireTimeout is how long a call waits for a free connection at most
	// (its own deadline).
	AcquireTimeout time.Duration `json:"acquire_timeout"`
}

// arrays is v, a struct, with each nil slice field set to an empty slice,
// so that JSON prints [] for it rather than null. The types' MarshalJSON
// methods pass their value through it as a defined type without methods.
func arrays[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		if f := rv.Field(i); f.Kind() == reflect.Slice && f.IsNil() && f.CanSet() {
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		}
	}
	return v
}

// nonEmpty is &s, or nil for "", so JSON prints null for an empty string.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
