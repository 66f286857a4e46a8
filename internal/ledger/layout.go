package ledger

import (
	"fmt"
	"time"
)

// Segments is the number of segments in the ring (the catalog's first
// migration creates ledger_0 to ledger_3). Capture appends to a segment
// directly, by its name (Segment), not through the partitioned ledger.
const Segments = 4

// SegmentPeriod is how long each segment is the current one in turn: a
// transaction appends to the segment its start time picks (SegmentAt), so
// that a writer finds its segment without reading a table, and every
// transaction appends to one segment only. The ring turns every
// Segments × SegmentPeriod (8 s) whatever is written, and a segment is
// left to its writers' stragglers and to reclaim for the three periods
// (6 s) until the ring enters it again (decision 0035).
const SegmentPeriod = 2 * time.Second

// SegmentAt is the SQL expression (int8) of the segment the timestamptz
// expression ts picks: its Unix time in whole seconds (rounded), over
// SegmentPeriod, modulo Segments. A transaction's segment is
// SegmentAt("pg_catalog.now()"), now() being its start.
func SegmentAt(ts string) string {
	return fmt.Sprintf("pg_catalog.mod(pg_catalog.date_part('epoch', %s)::pg_catalog.int8 OPERATOR(pg_catalog./) %d, %d)",
		ts, int(SegmentPeriod/time.Second), Segments)
}

// Segment is the quoted, unqualified name of segment i of the ring.
func Segment(i int) string { return segment(i) }

// segmentName is the unquoted name of segment i, as pg_class has it.
func segmentName(i int) string { return fmt.Sprintf("ledger_%d", i) }
