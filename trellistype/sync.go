package trellistype

import "encoding/json"

// SyncOptions says how Client.Sync treats the instance.
type SyncOptions struct {
	// DryRun returns the plan and changes nothing.
	DryRun bool `json:"dry_run"`
	// Prune drops the transforms the statements do not define. A transform
	// another one reads is refused unless that one goes too.
	Prune bool `json:"prune"`
}

// SyncAction is what Sync does to one transform.
type SyncAction string

// The sync actions.
const (
	// SyncCreate defines a transform the instance does not have.
	SyncCreate SyncAction = "create"
	// SyncAlter adds or drops output columns (ALTER TRANSFORM); the rest of
	// the transform is left as it is.
	SyncAlter SyncAction = "alter"
	// SyncRebuild drops the transform and defines it again, so its target
	// is rebuilt from its sources.
	SyncRebuild SyncAction = "rebuild"
	// SyncDrop drops a transform the statements do not define (Prune).
	SyncDrop SyncAction = "drop"
)

// SyncChange is one change of a sync plan.
type SyncChange struct {
	Action SyncAction `json:"action"`
	// Target is the qualified target table, "schema.table".
	Target string `json:"target"`
	// Statement is the TRANSFORM statement the transform gets (for a drop,
	// the one it had).
	Statement string `json:"statement"`
	// AddColumns and DropColumns are the output columns an alter adds and
	// drops.
	AddColumns  []string `json:"add_columns"`
	DropColumns []string `json:"drop_columns"`
	// Reason says why a transform is rebuilt rather than altered.
	Reason string `json:"reason"`
}

// MarshalJSON prints the column lists as arrays and an empty Reason as
// null.
func (c SyncChange) MarshalJSON() ([]byte, error) {
	type plain SyncChange
	return json.Marshal(struct {
		plain
		Reason *string `json:"reason"`
	}{arrays(plain(c)), nonEmpty(c.Reason)})
}

// SyncPlan is what Sync did, or would do with DryRun, in the order it
// does it. A plan with no changes means the instance already matches.
type SyncPlan struct {
	Changes []SyncChange `json:"changes"`
}

// MarshalJSON prints Changes as an array.
func (p SyncPlan) MarshalJSON() ([]byte, error) {
	type plain SyncPlan
	return json.Marshal(arrays(plain(p)))
}
