package ledger

import "testing"

// TestReducerKeepsDistinctOldValuesApart: two rows of one key whose old
// values differ are two changes, however their texts are made (a NULL, an
// empty text, a text "N"), so each old group is recomputed.
func TestReducerKeepsDistinctOldValuesApart(t *testing.T) {
	s := func(v string) *string { return &v }
	key := []*string{s("7")}
	cases := [][2][]*string{
		{{nil}, {s(""), s("N")}},
		{{nil, s("")}, {s(""), s("N"), s("")}},
		{{s("")}, {nil}},
		{{s("a"), s("")}, {s("a"), nil}},
		{{s("N")}, {nil}},
	}
	for _, c := range cases {
		var r reducer
		r.add(Change{Src: 1, Key: key, Vals: c[0]})
		r.add(Change{Src: 1, Key: key, Vals: c[1]})
		r.add(Change{Src: 1, Key: key, Vals: c[0]})
		if got := len(r.changes()); got != 2 {
			t.Errorf("old values %v and %v: %d changes, want 2", show(c[0]), show(c[1]), got)
		}
	}
}

func show(vs []*string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		if v == nil {
			out[i] = "NULL"
		} else {
			out[i] = "'" + *v + "'"
		}
	}
	return out
}
