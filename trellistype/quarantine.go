package trellistype

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// QuarantineEntry is the quarantine state of one target: a transform
// ("order_totals") or one of its columns ("order_totals.total").
type QuarantineEntry struct {
	// Target is the address: the bare transform, or transform.column.
	Target string `json:"target"`
	// State is StatePaused for a paused column, StateLive for one that is
	// not; a transform reports its own state.
	State State `json:"state"`
	// Since is when the column or transform was paused, or for a live
	// transform holding keys, when the oldest of them was poisoned; zero
	// (null in JSON) for a column that is not paused.
	Since time.Time `json:"since"`
	// Reason says, in words, why and what to do.
	Reason string `json:"reason"`
	// Error is the error that quarantined it ("" for PAUSE TRANSFORM), and
	// SQLState its PostgreSQL code.
	Error    string `json:"error"`
	SQLState string `json:"sqlstate"`
	// Rows is how many rows SampleQuarantined pages for the address: a
	// column's failed rows, a transform's held keys.
	Rows int64 `json:"rows"`
	// HeldKeys are the keys a transform holds; nil when none (and for a column).
	HeldKeys *HeldKeys `json:"held_keys"`
}

// MarshalJSON prints a zero Since as null.
func (q QuarantineEntry) MarshalJSON() ([]byte, error) {
	type plain QuarantineEntry
	var since *time.Time
	if !q.Since.IsZero() {
		since = &q.Since
	}
	return json.Marshal(struct {
		plain
		Since *time.Time `json:"since"`
	}{plain(q), since})
}

// PoisonEntry is one source row the apply path gave up on for a transform
// (every other transform reading the row keeps applying it).
type PoisonEntry struct {
	// Transform is the qualified target, "schema.table".
	Transform string `json:"transform"`
	// SrcTable is the qualified source table.
	SrcTable string `json:"src_table"`
	// Key is the key as Trellis renders it: the value, or "(a,b)" for a key
	// of several columns. An aggregate's key is its group.
	Key        string    `json:"key"`
	Error      string    `json:"error"`
	PoisonedAt time.Time `json:"poisoned_at"`
}

// PoisonSample is one quarantined source row, as SampleQuarantined pages them.
type PoisonSample struct {
	SrcTable string `json:"src_table"`
	Key      string `json:"key"`
	Error    string `json:"error"`
}

// SamplePage is one page of SampleQuarantined, ordered by (SrcTable, Key).
type SamplePage struct {
	Samples []PoisonSample `json:"samples"`
	// NextCursor continues after this page; nil on the last one.
	NextCursor *Cursor `json:"next_cursor"`
}

// MarshalJSON prints Samples as an array.
func (p SamplePage) MarshalJSON() ([]byte, error) {
	type plain SamplePage
	return json.Marshal(arrays(plain(p)))
}

// SampleOptions page Client.SampleQuarantined.
type SampleOptions struct {
	// Limit is the most rows to return; 0 means 100.
	Limit int `json:"limit"`
	// After is the NextCursor of the previous page; nil for the first.
	After *Cursor `json:"after"`
}

// Cursor is where a SamplePage ends: opaque, with a String form that
// UnmarshalText (and trellis.ParseCursor) reads back; the CLI prints and
// accepts it, and JSON carries the same string.
type Cursor struct {
	srcTable, key string
}

// NewCursor is the cursor that continues after the sample of key in
// srcTable.
func NewCursor(srcTable, key string) *Cursor {
	return &Cursor{srcTable: srcTable, key: key}
}

// After is the sample the cursor continues after.
func (c *Cursor) After() (srcTable, key string) { return c.srcTable, c.key }

const cursorPrefix = "tc1:"

// String is the cursor's portable form.
func (c *Cursor) String() string {
	raw, _ := json.Marshal([2]string{c.srcTable, c.key})
	return cursorPrefix + base64.RawURLEncoding.EncodeToString(raw)
}

// MarshalText is the String form.
func (c *Cursor) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads the String form.
func (c *Cursor) UnmarshalText(text []byte) error {
	enc, ok := strings.CutPrefix(string(text), cursorPrefix)
	var parts [2]string
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if !ok || err != nil || json.Unmarshal(raw, &parts) != nil {
		return fmt.Errorf("%q is not a Trellis sample cursor", text)
	}
	c.srcTable, c.key = parts[0], parts[1]
	return nil
}
