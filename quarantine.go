package trellis

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/trellis-pg/trellis/internal/engine"
)

// QuarantineEntry is the quarantine state of one target: a transform
// ("order_totals") or one of its columns ("order_totals.total").
type QuarantineEntry struct {
	// Target is the address: the bare transform, or transform.column.
	Target string
	// State is StatePaused for a paused column, StateLive for one that is
	// not; a transform reports its own state.
	State State
	// Since is when the column or transform was paused, or for a live
	// transform holding keys, when the oldest of them was poisoned.
	Since time.Time
	// Reason says, in words, why and what to do.
	Reason string
	// Error is the error that quarantined it ("" for PAUSE TRANSFORM), and
	// SQLState its PostgreSQL code.
	Error    string
	SQLState string
	// Rows is how many rows SampleQuarantined pages for the address: a
	// column's failed rows, a transform's held keys.
	Rows int64
	// HeldKeys are the keys a transform holds; nil when none (and for a column).
	HeldKeys *HeldKeys
}

// PoisonEntry is one source row the apply path gave up on for a transform
// (every other transform reading the row keeps applying it).
type PoisonEntry struct {
	// Transform is the qualified target, "schema.table".
	Transform string
	// SrcTable is the qualified source table.
	SrcTable string
	// Key is the key as Trellis renders it: the value, or "(a,b)" for a key
	// of several columns. An aggregate's key is its group.
	Key        string
	Error      string
	PoisonedAt time.Time
}

// PoisonSample is one quarantined source row, as SampleQuarantined pages them.
type PoisonSample struct {
	SrcTable string
	Key      string
	Error    string
}

// SamplePage is one page of SampleQuarantined, ordered by (SrcTable, Key).
type SamplePage struct {
	Samples []PoisonSample
	// NextCursor continues after this page; nil on the last one.
	NextCursor *Cursor
}

// SampleOptions page SampleQuarantined.
type SampleOptions struct {
	// Limit is the most rows to return; 0 means 100.
	Limit int
	// After is the NextCursor of the previous page; nil for the first.
	After *Cursor
}

// Cursor is where a SamplePage ends: opaque, with a String form that
// ParseCursor reads back (the CLI prints and accepts it).
type Cursor struct {
	c engine.SampleCursor
}

const cursorPrefix = "tc1:"

// String is the cursor's portable form.
func (c *Cursor) String() string {
	raw, _ := json.Marshal([2]string{c.c.SrcTable, c.c.Key})
	return cursorPrefix + base64.RawURLEncoding.EncodeToString(raw)
}

// ParseCursor reads a cursor from its String form.
func ParseCursor(s string) (*Cursor, error) {
	enc, ok := strings.CutPrefix(s, cursorPrefix)
	var parts [2]string
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if !ok || err != nil || json.Unmarshal(raw, &parts) != nil {
		return nil, newError(CodeValidation, "%q is not a Trellis sample cursor", s)
	}
	return &Cursor{c: engine.SampleCursor{SrcTable: parts[0], Key: parts[1]}}, nil
}

func quarantineEntry(q engine.QuarantineEntry) QuarantineEntry {
	out := QuarantineEntry{Target: q.Address, State: State(q.State), Since: q.Since.UTC().Truncate(time.Microsecond),
		Reason: q.Reason, Error: q.Error, SQLState: q.SQLState, Rows: q.Rows}
	if !q.OldestPoisoned.IsZero() {
		out.HeldKeys = &HeldKeys{Count: q.Rows, OldestPoisonedAt: q.OldestPoisoned.UTC().Truncate(time.Microsecond)}
	}
	return out
}

// Quarantined lists every paused or quarantined column, every paused
// transform and every transform holding keys, ordered by address. It is
// cheap enough for a health check to poll.
func (c *Client) Quarantined(ctx context.Context) ([]QuarantineEntry, error) {
	var out []QuarantineEntry
	err := c.call(ctx, "listing the quarantine", func(ctx context.Context) error {
		qs, err := c.eng.Quarantined(ctx)
		for _, q := range qs {
			out = append(out, quarantineEntry(q))
		}
		return err
	})
	return out, err
}

// QuarantineStatus reports one target: a transform ("order_totals") or one
// of its columns ("order_totals.total"). A column that is not paused is
// StateLive. An unknown transform or column is CodeNotFound.
func (c *Client) QuarantineStatus(ctx context.Context, target string) (QuarantineEntry, error) {
	var out QuarantineEntry
	err := c.call(ctx, "reading a quarantine status", func(ctx context.Context) error {
		q, err := c.eng.QuarantineStatus(ctx, target)
		out = quarantineEntry(q)
		return err
	})
	return out, err
}

// SampleQuarantined pages the rows quarantined under target, to diagnose
// the cause: for a column ("order_totals.total"), the rows on which its
// expression failed (a row that was fixed leaves the sample when its change
// is applied); for a transform ("order_totals"), the keys it holds.
func (c *Client) SampleQuarantined(ctx context.Context, target string, opts SampleOptions) (SamplePage, error) {
	limit := opts.Limit
	if limit == 0 {
		limit = 100
	}
	if limit < 0 || limit > 10000 {
		return SamplePage{}, newError(CodeValidation, "a sample limit is between 1 and 10000, not %d", limit)
	}
	var page SamplePage
	err := c.call(ctx, "sampling the quarantine", func(ctx context.Context) error {
		var after *engine.SampleCursor
		if opts.After != nil {
			after = &opts.After.c
		}
		rows, next, err := c.eng.SampleQuarantined(ctx, target, limit, after)
		if err != nil {
			return err
		}
		page.Samples = make([]PoisonSample, len(rows))
		for i, r := range rows {
			page.Samples[i] = PoisonSample{SrcTable: r.SrcTable, Key: r.Key, Error: r.Error}
		}
		if next != nil {
			page.NextCursor = &Cursor{c: *next}
		}
		return nil
	})
	return page, err
}

// PoisonedSince lists every key poisoned after since, oldest first. Poll it
// with the last entry's PoisonedAt so a whole-table failure does not go
// unnoticed. PoisonedAt is when a drain page recorded the key, a moment
// before that page committed, so a page that commits later can list a key
// a little older than one already seen: poll with a few seconds of overlap
// and skip the entries (transform, table, key, time) you already have.
func (c *Client) PoisonedSince(ctx context.Context, since time.Time) ([]PoisonEntry, error) {
	var out []PoisonEntry
	err := c.call(ctx, "listing poisoned keys", func(ctx context.Context) error {
		rows, err := c.eng.PoisonedSince(ctx, since)
		for _, r := range rows {
			out = append(out, PoisonEntry{Transform: r.Transform, SrcTable: r.SrcTable, Key: r.Key, Error: r.Error,
				PoisonedAt: r.At.UTC().Truncate(time.Microsecond)})
		}
		return err
	})
	return out, err
}

// ReleaseKey releases one key that transform holds, once its cause is
// fixed: the key is re-derived from its current row (the changes held
// meanwhile are not replayed; the current row is all that counts), and is
// poisoned again if the cause remains. sourceTable ("public.orders" or
// "orders") and key are as SampleQuarantined and PoisonedSince report them.
// An unknown transform, or a key it does not hold, is CodeNotFound and
// changes nothing. The release first waits for the drain pages in flight on
// the transform; a wait past 30 seconds is CodeTimeout and changes nothing.
func (c *Client) ReleaseKey(ctx context.Context, transform, sourceTable, key string) error {
	return c.call(ctx, "releasing a key", func(ctx context.Context) error {
		return c.eng.ReleaseKey(ctx, transform, sourceTable, key)
	})
}
