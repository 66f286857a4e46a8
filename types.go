package trellis

import (
	"strings"
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
	// StateLive: built, and every committed change of its source is applied.
	StateLive State = "live"
	// StateCatchingUp: live, but an upstream column it reads is paused.
	StateCatchingUp State = "catching_up"
	// StatePaused: nothing is applied until RESUME; the reason is in the status.
	StatePaused State = "paused"
)

// Status is the state of one transform, as Client.Status reports it.
type Status struct {
	// Target is the qualified target table, "schema.table".
	Target string
	State  State
	// Since is when the transform entered State.
	Since time.Time
	// Statement is the definition as it was applied.
	Statement string
	// PausedReason says why a paused transform is paused.
	PausedReason string
	// BackfillingColumns are columns added by ALTER TRANSFORM that are still
	// being filled.
	BackfillingColumns []string
	// BuildRows is how many rows the current (or last) build has written.
	BuildRows int64

	HeldKeys              *HeldKeys
	DrainFailure          *DrainFailure
	PausedUpstreamColumns []string
	SourceIndexGaps       []SourceIndexGap
	Correcting            []CorrectingNode
	CaptureFailure        *CaptureFailure
	CaptureWait           *CaptureWait
	BackfillFailure       *BackfillFailure
}

// HeldKeys are the source keys a transform holds in quarantine.
type HeldKeys struct {
	Count            int64
	OldestPoisonedAt time.Time
}

// DrainFailure is a page of changes that keeps failing with nothing to blame
// on a row: it is retried with backoff and disappears once it succeeds.
type DrainFailure struct {
	// SegSeq identifies the failing page.
	SegSeq int64
	// Tables are the qualified source tables the page holds changes of.
	Tables []string
	Error  string
	// SQLState is the PostgreSQL error code, nil when the error did not come
	// from PostgreSQL.
	SQLState *string
	Since    time.Time
	LastSeen time.Time
	Attempts int
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
	Kind        CaptureFailureKind
	SourceTable string
	Error       string
	Columns     []string
	DetectedAt  time.Time
}

// CaptureWait is a capture install, widen or uninstall waiting on a lock
// that other sessions hold or queue for.
type CaptureWait struct {
	Operation string
	Table     string
	LockMode  string
	Blockers  []string
	Since     time.Time
}

// BackfillFailure is a build that keeps failing.
type BackfillFailure struct {
	Attempts      int
	LastError     string
	NextAttemptAt time.Time
}

// CorrectingNode is a partition of a partitioned source a transform is being
// corrected for.
type CorrectingNode struct {
	Node          string
	Since         time.Time
	KeysRemaining *int64
}

// IndexRole is the part of a definition a source index serves.
type IndexRole string

// Index roles.
const (
	RoleGroupBy    IndexRole = "group_by"
	RoleJoinFrom   IndexRole = "join_from"
	RoleJoinJoined IndexRole = "join_joined"
)

// SourceIndexGap is a source index a GROUP BY or JOIN target needs and lacks.
type SourceIndexGap struct {
	Table    string
	Columns  []string
	Role     IndexRole
	OptedOut bool
	Fix      string
}

// DefinitionSummary is one registered transform, as Client.Definitions lists it.
type DefinitionSummary struct {
	// Target is the qualified target table.
	Target    string
	Statement string
	State     State
	Since     time.Time
	// Sources are the qualified source tables it reads.
	Sources   []string
	CreatedAt time.Time
}

// Applied is what a statement did: one of TransformDefined, Paused,
// Resumed, Dropped or Altered. Tell them apart with a type switch.
type Applied interface{ applied() }

// TransformDefined is the result of a TRANSFORM statement.
type TransformDefined struct {
	Target string // "schema.table"
}

// Paused is the result of PAUSE TRANSFORM.
type Paused struct {
	Addresses []string
}

// Resumed is the result of RESUME TRANSFORM: the addresses resumed (empty
// when nothing was paused).
type Resumed struct {
	Addresses []string
}

// Dropped is the result of DROP TRANSFORM.
type Dropped struct {
	Target string
}

// Altered is the result of ALTER TRANSFORM.
type Altered struct {
	Target string
}

func (TransformDefined) applied() {}
func (Paused) applied()           {}
func (Resumed) applied()          {}
func (Dropped) applied()          {}
func (Altered) applied()          {}

// Watermark is a read-your-writes token: a snapshot of the transactions
// committed when it was taken. It is opaque; String and ParseWatermark carry
// it across a process boundary.
type Watermark struct {
	snap string
}

const watermarkPrefix = "tw1:"

// String renders the token for another process.
func (w Watermark) String() string { return watermarkPrefix + w.snap }

// IsZero reports whether w is the zero Watermark.
func (w Watermark) IsZero() bool { return w.snap == "" }

// ParseWatermark parses a token printed by Watermark.String.
func ParseWatermark(s string) (Watermark, error) {
	snap, ok := strings.CutPrefix(s, watermarkPrefix)
	if !ok || !validSnapshot(snap) {
		return Watermark{}, newError(CodeValidation, "%q is not a Trellis watermark token", s)
	}
	return Watermark{snap: snap}, nil
}

// validSnapshot checks the text form of pg_snapshot: xmin:xmax:xip,xip...
func validSnapshot(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return false
	}
	for _, c := range parts[0] + parts[1] {
		if c < '0' || c > '9' {
			return false
		}
	}
	for _, c := range parts[2] {
		if (c < '0' || c > '9') && c != ',' {
			return false
		}
	}
	return true
}
