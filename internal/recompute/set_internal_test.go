package recompute

import (
	"testing"

	"github.com/trellis-pg/trellis/internal/catalog"
)

// TestSetKeepsKeysWithNullPartsApart: keys whose parts may be NULL (a
// reader of an outer join's target, decision 0049) are distinct keys of a
// set however their texts are made, so each is recomputed.
func TestSetKeepsKeysWithNullPartsApart(t *testing.T) {
	s := func(v string) *string { return &v }
	pairs := [][2][]*string{
		{{nil, s(""), s("N")}, {s(""), s("N"), nil}},
		{{nil, s("N")}, {s("N"), nil}},
		{{s(""), nil}, {nil, s("")}},
	}
	for _, p := range pairs {
		wk := NewSet(&catalog.Transform{})
		wk.Add(p[0], 1)
		wk.Add(p[1], 1)
		wk.Add(p[0], 1)
		if wk.Len() != 2 {
			t.Errorf("keys %s and %s: %d keys, want 2", RenderKey(p[0]), RenderKey(p[1]), wk.Len())
		}
	}
}
