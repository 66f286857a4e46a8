package trellis

import (
	"context"
	"time"
)

// ParseCursor reads a cursor from its String form.
func ParseCursor(s string) (*Cursor, error) {
	var c Cursor
	if err := c.UnmarshalText([]byte(s)); err != nil {
		return nil, newError(CodeValidation, "%v", err)
	}
	return &c, nil
}

// Quarantined lists every paused or quarantined column, every paused
// transform and every transform holding keys, ordered by address. It is
// cheap enough for a health check to poll.
func (c *Client) Quarantined(ctx context.Context) ([]QuarantineEntry, error) {
	var out []QuarantineEntry
	err := c.call(ctx, "listing the quarantine", func(ctx context.Context) error {
		var err error
		out, err = c.eng.Quarantined(ctx)
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
		var err error
		out, err = c.eng.QuarantineStatus(ctx, target)
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
		var err error
		page, err = c.eng.SampleQuarantined(ctx, target, limit, opts.After)
		return err
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
		var err error
		out, err = c.eng.PoisonedSince(ctx, since)
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
