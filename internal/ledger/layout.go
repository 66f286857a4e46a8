package ledger

import "fmt"

// Segments is the number of segments in the ring (the catalog's first
// migration creates ledger_0 to ledger_3). Capture appends to the current
// one directly, by its name (Segment), not through the partitioned ledger.
const Segments = 4

// Segment is the quoted, unqualified name of segment i of the ring.
func Segment(i int) string { return segment(i) }

// segmentName is the unquoted name of segment i, as pg_class has it.
func segmentName(i int) string { return fmt.Sprintf("ledger_%d", i) }
