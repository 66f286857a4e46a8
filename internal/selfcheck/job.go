// Package selfcheck audits a target against a fresh recompute of its
// definition, as a background job: the job's row in the catalog records
// its state, progress and report, so any process can read it; a process
// running drain workers runs it (see Runner and docs/decisions/0009).
package selfcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
)

// Modes and states as the catalog stores them.
const (
	ModeStandard = "standard"
	ModeStrict   = "strict"

	StateQueued    = "queued"
	StateRunning   = "running"
	StateDone      = "done"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
)

// Outcomes of a report.
const (
	OutcomeConsistent = "consistent"
	OutcomeDiverged   = "diverged"
)

// Kinds of divergence.
const (
	KindMissing   = "missing"
	KindExtra     = "extra"
	KindDiffering = "differing"
)

// Job is one self-check job.
type Job struct {
	ID           int64
	TransformID  int
	Target       string // schema.table
	Mode         string
	Timeout      time.Duration
	State        string
	RowsCompared int64
	Report       *Report
	Error        *string
	QueuedAt     time.Time
	StartedAt    *time.Time
	FinishedAt   *time.Time
}

// Report is a finished job's verdict, stored as JSON in the job's row.
type Report struct {
	Outcome       string         `json:"outcome"`
	Divergences   []Divergence   `json:"divergences"`
	Truncated     bool           `json:"truncated"`
	RowsCompared  int64          `json:"rows_compared"`
	Missing       int64          `json:"missing"`
	Extra         int64          `json:"extra"`
	Differing     int64          `json:"differing"`
	InFlight      int64          `json:"in_flight"`
	HeldKeys      *Held          `json:"held_keys"`
	DrainFailures []DrainFailure `json:"drain_failures"`
	PausedColumns []string       `json:"paused_columns"`
	StartedAt     time.Time      `json:"started_at"`
	FinishedAt    time.Time      `json:"finished_at"`
}

// Divergence is one key out of step.
type Divergence struct {
	Kind       string             `json:"kind"`
	Key        string             `json:"key"`
	Columns    []string           `json:"columns,omitempty"`
	Target     map[string]*string `json:"target,omitempty"`
	Recomputed map[string]*string `json:"recomputed,omitempty"`
}

// Held summarises the keys a transform holds.
type Held struct {
	Count            int64     `json:"count"`
	OldestPoisonedAt time.Time `json:"oldest_poisoned_at"`
}

// DrainFailure is a page that keeps failing on one of the transform's sources.
type DrainFailure struct {
	SegSeq   int64     `json:"seg_seq"`
	Tables   []string  `json:"tables"`
	Error    string    `json:"error"`
	SQLState *string   `json:"sqlstate"`
	Since    time.Time `json:"since"`
	LastSeen time.Time `json:"last_seen"`
	Attempts int       `json:"attempts"`
}

// Start queues a check of the transform, or returns its unfinished job
// (whatever mode and timeout it was started with). A finished job of the
// transform is replaced: its id reads as none from then on.
func Start(ctx context.Context, q catalog.Querier, cat *catalog.Catalog, transformID int, mode string, timeout time.Duration) (*Job, error) {
	ms := int64((timeout + time.Millisecond - 1) / time.Millisecond) // rounded up
	var id int64
	err := q.QueryRow(ctx, cat.SQL(sqlStart), transformID, mode, ms).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		err = q.QueryRow(ctx, cat.SQL(sqlJobOf), transformID).Scan(&id)
	}
	if err != nil {
		return nil, fmt.Errorf("queueing a self-check: %w", err)
	}
	j, err := Get(ctx, q, cat, id)
	if err == nil && j == nil {
		err = fmt.Errorf("the self-check job %d vanished as it was queued", id)
	}
	return j, err
}

// Get reads a job; nil when there is none (replaced, or its transform dropped).
func Get(ctx context.Context, q catalog.Querier, cat *catalog.Catalog, id int64) (*Job, error) {
	var j Job
	var schema, name string
	var timeoutMS int64
	var report []byte
	err := q.QueryRow(ctx, cat.SQL(sqlJob), id).Scan(&j.ID, &j.TransformID, &schema, &name, &j.Mode, &timeoutMS,
		&j.State, &j.RowsCompared, &report, &j.Error, &j.QueuedAt, &j.StartedAt, &j.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading self-check job %d: %w", id, err)
	}
	j.Target = schema + "." + name
	j.Timeout = time.Duration(timeoutMS) * time.Millisecond
	if report != nil {
		j.Report = &Report{}
		if err := json.Unmarshal(report, j.Report); err != nil {
			return nil, fmt.Errorf("decoding the report of self-check job %d: %w", id, err)
		}
	}
	return &j, nil
}
