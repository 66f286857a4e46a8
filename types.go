package trellis

import (
	"strings"

	"github.com/trellis-pg/trellis/trellistype"
)

// The value types are declared once, in package trellistype, which the
// internal packages and the trellis command share; these aliases are the
// names users write.

// State is where a transform is in its lifecycle.
type State = trellistype.State

// The lifecycle states.
const (
	StateWaitingToBackfill = trellistype.StateWaitingToBackfill
	StateBackfilling       = trellistype.StateBackfilling
	StateLive              = trellistype.StateLive
	StateCatchingUp        = trellistype.StateCatchingUp
	StatePaused            = trellistype.StatePaused
)

// Status is the state of one transform, as Client.Status reports it.
type Status = trellistype.Status

// HeldKeys are the source keys a transform holds in quarantine.
type HeldKeys = trellistype.HeldKeys

// DrainFailure is a page of changes that keeps failing with nothing to blame
// on a row.
type DrainFailure = trellistype.DrainFailure

// CaptureFailureKind says what kind of capture failure a transform has.
type CaptureFailureKind = trellistype.CaptureFailureKind

// Capture failure kinds.
const (
	CaptureFailureCapture    = trellistype.CaptureFailureCapture
	CaptureFailureHalt       = trellistype.CaptureFailureHalt
	CaptureFailureDisruption = trellistype.CaptureFailureDisruption
)

// CaptureFailure says why capture of a source is broken, or why applying
// halted on a transform.
type CaptureFailure = trellistype.CaptureFailure

// CaptureWait is a capture install, widen or uninstall waiting on a lock.
type CaptureWait = trellistype.CaptureWait

// BackfillFailure is a build that keeps failing.
type BackfillFailure = trellistype.BackfillFailure

// CorrectingNode is a partition of a partitioned source a transform is being
// corrected for.
type CorrectingNode = trellistype.CorrectingNode

// IndexRole is the part of a definition a source index serves.
type IndexRole = trellistype.IndexRole

// Index roles.
const (
	RoleGroupBy     = trellistype.RoleGroupBy
	RolePartitionBy = trellistype.RolePartitionBy
	RoleJoinFrom    = trellistype.RoleJoinFrom
	RoleJoinJoined  = trellistype.RoleJoinJoined
	RoleOrderBy     = trellistype.RoleOrderBy
)

// SourceIndexGap is a source index a GROUP BY or JOIN target needs and lacks.
type SourceIndexGap = trellistype.SourceIndexGap

// DefinitionSummary is one registered transform, as Client.Definitions lists it.
type DefinitionSummary = trellistype.DefinitionSummary

// Config is the configuration a client connected with.
type Config = trellistype.Config

// Applied is what a statement did: one of TransformDefined, Paused,
// Resumed, Dropped or Altered. Tell them apart with a type switch.
type Applied = trellistype.Applied

// TransformDefined is the result of a TRANSFORM statement.
type TransformDefined = trellistype.TransformDefined

// Paused is the result of PAUSE TRANSFORM.
type Paused = trellistype.Paused

// Resumed is the result of RESUME TRANSFORM.
type Resumed = trellistype.Resumed

// Dropped is the result of DROP TRANSFORM.
type Dropped = trellistype.Dropped

// Altered is the result of ALTER TRANSFORM.
type Altered = trellistype.Altered

// QuarantineEntry is the quarantine state of one target: a transform
// ("order_totals") or one of its columns ("order_totals.total").
type QuarantineEntry = trellistype.QuarantineEntry

// PoisonEntry is one source row the apply path gave up on for a transform.
type PoisonEntry = trellistype.PoisonEntry

// PoisonSample is one quarantined source row, as SampleQuarantined pages them.
type PoisonSample = trellistype.PoisonSample

// SamplePage is one page of SampleQuarantined, ordered by (SrcTable, Key).
type SamplePage = trellistype.SamplePage

// SampleOptions page SampleQuarantined.
type SampleOptions = trellistype.SampleOptions

// Cursor is where a SamplePage ends: opaque, with a String form that
// ParseCursor reads back.
type Cursor = trellistype.Cursor

// SelfCheckMode says how a self-check treats rows that differ.
type SelfCheckMode = trellistype.SelfCheckMode

// Self-check modes.
const (
	SelfCheckStandard = trellistype.SelfCheckStandard
	SelfCheckStrict   = trellistype.SelfCheckStrict
)

// SelfCheckOptions configure SelfCheck.
type SelfCheckOptions = trellistype.SelfCheckOptions

// SelfCheckState is where a self-check job is.
type SelfCheckState = trellistype.SelfCheckState

// Self-check job states.
const (
	SelfCheckQueued    = trellistype.SelfCheckQueued
	SelfCheckRunning   = trellistype.SelfCheckRunning
	SelfCheckDone      = trellistype.SelfCheckDone
	SelfCheckFailed    = trellistype.SelfCheckFailed
	SelfCheckCancelled = trellistype.SelfCheckCancelled
)

// SelfCheckOutcome is a finished self-check's verdict.
type SelfCheckOutcome = trellistype.SelfCheckOutcome

// Self-check outcomes.
const (
	SelfCheckConsistent = trellistype.SelfCheckConsistent
	SelfCheckDiverged   = trellistype.SelfCheckDiverged
)

// DivergenceKind says how a target row is out of step.
type DivergenceKind = trellistype.DivergenceKind

// Divergence kinds.
const (
	DivergenceMissing   = trellistype.DivergenceMissing
	DivergenceExtra     = trellistype.DivergenceExtra
	DivergenceDiffering = trellistype.DivergenceDiffering
)

// SelfCheckJob is a background check of a target, as SelfCheck starts it
// and Client.SelfCheckJob reads it back.
type SelfCheckJob = trellistype.SelfCheckJob

// SelfCheckReport is what a finished self-check found.
type SelfCheckReport = trellistype.SelfCheckReport

// Divergence is one key a self-check found out of step.
type Divergence = trellistype.Divergence

// Code classifies an Error. The set is closed: these constants are all the
// codes Trellis returns.
type Code = trellistype.Code

// The error codes.
const (
	CodeParse       = trellistype.CodeParse
	CodeValidation  = trellistype.CodeValidation
	CodeNotFound    = trellistype.CodeNotFound
	CodeConflict    = trellistype.CodeConflict
	CodeTimeout     = trellistype.CodeTimeout
	CodeUnavailable = trellistype.CodeUnavailable
	CodeInternal    = trellistype.CodeInternal
)

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
