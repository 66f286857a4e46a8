package trellistype

import (
	"encoding/json"
	"time"
)

// SelfCheckMode says how a self-check treats rows that differ.
type SelfCheckMode string

// Self-check modes.
const (
	// SelfCheckStandard looks again at every key that differs, once the
	// target has caught up anew, and sets apart what is still being
	// applied then: sound while the source is being written.
	SelfCheckStandard SelfCheckMode = "standard"
	// SelfCheckStrict reports what differs after one wait per page: only
	// sound once writes to the tables the target depends on have stopped.
	SelfCheckStrict SelfCheckMode = "strict"
)

// SelfCheckOptions configure Client.SelfCheck.
type SelfCheckOptions struct {
	// Timeout is how long each page of the check waits for the target to
	// catch up with its sources, per wait (a standard check waits up to
	// twice per page, a strict one once), and how long the job waits for
	// a transform that is not live yet to become live. Required.
	Timeout time.Duration `json:"timeout"`
	// Mode is SelfCheckStandard (the default) or SelfCheckStrict.
	Mode SelfCheckMode `json:"mode"`
}

// SelfCheckState is where a self-check job is.
type SelfCheckState string

// Self-check job states. Queued and running are in progress; done carries
// a report; failed and cancelled carry an error.
const (
	SelfCheckQueued    SelfCheckState = "queued"
	SelfCheckRunning   SelfCheckState = "running"
	SelfCheckDone      SelfCheckState = "done"
	SelfCheckFailed    SelfCheckState = "failed"
	SelfCheckCancelled SelfCheckState = "cancelled"
)

// SelfCheckOutcome is a finished self-check's verdict.
type SelfCheckOutcome string

// Self-check outcomes.
const (
	// SelfCheckConsistent: every key compared agrees with a fresh recompute.
	SelfCheckConsistent SelfCheckOutcome = "consistent"
	// SelfCheckDiverged: some keys do not; the report counts them by kind.
	SelfCheckDiverged SelfCheckOutcome = "diverged"
)

// DivergenceKind says how a target row is out of step.
type DivergenceKind string

// Divergence kinds.
const (
	// DivergenceMissing: the definition yields a row the target lacks.
	DivergenceMissing DivergenceKind = "missing"
	// DivergenceExtra: the target has a row the definition does not yield.
	DivergenceExtra DivergenceKind = "extra"
	// DivergenceDiffering: both have the key, with different values.
	DivergenceDiffering DivergenceKind = "differing"
)

// SelfCheckJob is a background check of a target, as SelfCheck starts it
// and Client.SelfCheckJob reads it back.
type SelfCheckJob struct {
	ID int64 `json:"id"`
	// Target is the qualified target, "schema.table".
	Target string         `json:"target"`
	Mode   SelfCheckMode  `json:"mode"`
	State  SelfCheckState `json:"state"`
	// RowsCompared is how many keys the job has compared so far.
	RowsCompared int64 `json:"rows_compared"`
	// Report is the verdict; nil until State is SelfCheckDone.
	Report *SelfCheckReport `json:"report"`
	// Error says why a failed or cancelled job ended; nil otherwise.
	Error *string `json:"error"`
	// Timeout is the job's SelfCheckOptions.Timeout (to the millisecond).
	Timeout    time.Duration `json:"timeout"`
	QueuedAt   time.Time     `json:"queued_at"`
	StartedAt  *time.Time    `json:"started_at"`
	FinishedAt *time.Time    `json:"finished_at"`
}

// Finished reports whether the job has ended: done, failed or cancelled.
func (j SelfCheckJob) Finished() bool {
	return j.State == SelfCheckDone || j.State == SelfCheckFailed || j.State == SelfCheckCancelled
}

// SelfCheckReport is what a finished self-check found, auditing the whole
// of a target against a fresh recompute of its definition.
type SelfCheckReport struct {
	Outcome SelfCheckOutcome `json:"outcome"`
	// Divergences are examples, at most ten, in key order.
	Divergences []Divergence `json:"divergences"`
	// Truncated says there are more divergences than Divergences lists.
	Truncated bool `json:"truncated"`
	// RowsCompared is how many keys were compared.
	RowsCompared int64 `json:"rows_compared"`
	// Missing, Extra and Differing count the divergences by kind.
	Missing   int64 `json:"missing"`
	Extra     int64 `json:"extra"`
	Differing int64 `json:"differing"`
	// InFlight counts keys that differed and were still being applied
	// when looked at again (a standard check does not report them).
	InFlight int64 `json:"in_flight"`
	// HeldKeys are the keys the transform holds in quarantine: left out
	// of the comparison; nil when none.
	HeldKeys *HeldKeys `json:"held_keys"`
	// DrainFailures are the pages that keep failing on the transform's
	// sources; nil when none.
	DrainFailures []DrainFailure `json:"drain_failures"`
	// PausedColumns are the columns left out of the comparison because
	// they are paused; nil when none.
	PausedColumns []string  `json:"paused_columns"`
	StartedAt     time.Time `json:"started_at"`
	FinishedAt    time.Time `json:"finished_at"`
}

// MarshalJSON prints lists as arrays.
func (r SelfCheckReport) MarshalJSON() ([]byte, error) {
	type plain SelfCheckReport
	return json.Marshal(arrays(plain(r)))
}

// Divergence is one key a self-check found out of step.
type Divergence struct {
	Kind DivergenceKind `json:"kind"`
	// Key is the target's key as Trellis renders keys: the value, or
	// "(a,b)" for a key of several columns.
	Key string `json:"key"`
	// Columns are the columns that differ (DivergenceDiffering only).
	Columns []string `json:"columns"`
	// Target and Recomputed are the compared columns' values as text, in
	// the target and in a fresh recompute (nil for a NULL value); Target is
	// nil for a missing row, Recomputed for an extra one.
	Target     map[string]*string `json:"target"`
	Recomputed map[string]*string `json:"recomputed"`
}

// MarshalJSON prints Columns as an array.
func (d Divergence) MarshalJSON() ([]byte, error) {
	type plain Divergence
	return json.Marshal(arrays(plain(d)))
}
