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
	"github.com/trellis-pg/trellis/trellistype"
)

// Job is one self-check job, as the public package reports it, with the
// catalog id of the transform it checks.
type Job struct {
	trellistype.SelfCheckJob
	TransformID int
}

// storedReport is a report as the job's row stores it: the public type's
// JSON, except that a list that is nil stays null, so it reads back nil.
type storedReport trellistype.SelfCheckReport

// Start queues a check of the transform, or returns its unfinished job
// (whatever mode and timeout it was started with). A finished job of the
// transform is replaced: its id reads as none from then on.
func Start(ctx context.Context, q catalog.Querier, cat *catalog.Catalog, transformID int, mode trellistype.SelfCheckMode, timeout time.Duration) (*Job, error) {
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
		var rep storedReport
		if err := json.Unmarshal(report, &rep); err != nil {
			return nil, fmt.Errorf("decoding the report of self-check job %d: %w", id, err)
		}
		j.Report = (*trellistype.SelfCheckReport)(&rep)
	}
	return &j, nil
}
