package bench

import "testing"

// TestDistinctOnProbesPollTheGroup: two writes to rows of one group, the
// second with the larger v, leave only the second row as the group's best
// (DISTINCT ON ... ORDER BY v DESC): the first write must be seen through
// its group, whose v only grows, or the latency benchmark waits for a row
// the target never shows again.
func TestDistinctOnProbesPollTheGroup(t *testing.T) {
	e := &env{shape: shapeOf(DistinctOn)}
	p := e.prober()
	k1, w1 := p.wrote(7, 1)
	k2, w2 := p.wrote(7+shapeGroups, 2)
	if k1 != k2 {
		t.Fatalf("writes to rows 7 and %d of one group poll keys %d and %d: want the group", 7+shapeGroups, k1, k2)
	}
	if w1 != 1 || w2 != 2 {
		t.Fatalf("want v 1 then 2, got %d then %d", w1, w2)
	}
	if e.shape.pollKey != "grp" {
		t.Fatalf("the poller reads %s: want grp", e.shape.pollKey)
	}
}
