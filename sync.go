package trellis

import (
	"context"

	"github.com/trellis-pg/trellis/internal/engine"
	"github.com/trellis-pg/trellis/trellistype"
)

// SyncOptions says how Sync treats the instance: DryRun, Prune.
type SyncOptions = trellistype.SyncOptions

// SyncPlan is what Sync did, or would do, in order.
type SyncPlan = trellistype.SyncPlan

// SyncChange is one change of a SyncPlan.
type SyncChange = trellistype.SyncChange

// SyncAction is what Sync does to one transform.
type SyncAction = trellistype.SyncAction

// The sync actions.
const (
	SyncCreate  = trellistype.SyncCreate
	SyncAlter   = trellistype.SyncAlter
	SyncRebuild = trellistype.SyncRebuild
	SyncDrop    = trellistype.SyncDrop
)

// Sync makes the instance's transforms match statements, a file's worth
// of TRANSFORM statements in the format of trellis apply -f (separated by
// blank lines or ';' lines), and returns the plan it carried out:
//
//   - a transform the instance lacks is created (SyncCreate);
//   - one whose definition is the same, whatever the formatting, the order
//     of its output columns or the qualification of names that resolve
//     alike, is left alone (no change listed);
//   - one that differs only by added or dropped output columns is altered
//     (SyncAlter: ALTER TRANSFORM ADD and DROP COLUMN; the other columns
//     keep their values, an added one is filled as after ALTER);
//   - any other difference rebuilds it (SyncRebuild: dropped and defined
//     again, so its target is empty until it is built again, and so is the
//     target of every transform reading it, which must then be in the file);
//   - with opts.Prune, a transform the statements do not define is dropped
//     (SyncDrop); one that a kept transform reads is refused, before
//     anything changes.
//
// Syncing the same statements again returns an empty plan. With
// opts.DryRun, Sync returns the plan and changes nothing. Statements that
// do not parse, are not TRANSFORM statements, or that the engine would
// refuse against the current tables change nothing (CodeParse,
// CodeValidation, CodeNotFound or CodeConflict). An error while the plan
// is carried out stops it there: the plan is returned with the error,
// which says which changes were applied. Two syncs of one instance never
// run at once; the second waits for the first.
func (c *Client) Sync(ctx context.Context, statements string, opts SyncOptions) (SyncPlan, error) {
	if c.closed.Load() {
		return SyncPlan{}, errClosed
	}
	items, err := engine.ParseSyncFile(statements)
	if err != nil {
		return SyncPlan{}, translate(ctx, "syncing definitions", err)
	}
	var out SyncPlan
	err = c.call(ctx, "syncing definitions", func(ctx context.Context) error {
		return c.eng.WithSyncLock(ctx, func() error {
			p, err := c.eng.PlanSync(ctx, items, opts.Prune)
			if err != nil {
				return err
			}
			out = SyncPlan{Changes: p.Changes}
			if opts.DryRun {
				return nil
			}
			return c.eng.ApplySync(ctx, p)
		})
	})
	return out, err
}
