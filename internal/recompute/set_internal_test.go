package recompute

import (
	"context"
	"testing"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/testsupport"
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

// TestKeyColumnsReadBackAsTheirTexts: the key parameters rendered as array
// literals (keyColumns) are read by PostgreSQL as the keys' texts and NULLs,
// whatever the texts hold: each element comes back as it went in.
func TestKeyColumnsReadBackAsTheirTexts(t *testing.T) {
	s := func(v string) *string { return &v }
	keys := [][]*string{}
	for _, v := range []string{"", " a", "b ", "NULL", "null", "x,y", "{z}", `q"q`, `back\slash`, `ends\`, "tab\there", "new\nline", "ünï", "(1,2)", `{"a",b}`, "7"} {
		keys = append(keys, []*string{s(v), s(v + "2")})
	}
	keys = append(keys, []*string{nil, s("x")})
	_, pool := testsupport.Pool(t)
	ctx := context.Background()
	cols := keyColumns(keys, 2)
	for i, col := range cols {
		var got []*string
		if err := pool.QueryRow(ctx, `SELECT $1::text[]`, col).Scan(&got); err != nil {
			t.Fatalf("column %d (%s): %v", i, col, err)
		}
		if len(got) != len(keys) {
			t.Fatalf("column %d: %d elements, want %d", i, len(got), len(keys))
		}
		for j, k := range keys {
			if (got[j] == nil) != (k[i] == nil) || got[j] != nil && *got[j] != *k[i] {
				t.Errorf("column %d, key %d: got %v, want %v", i, j, RenderKey([]*string{got[j]}), RenderKey([]*string{k[i]}))
			}
		}
	}
}

// TestSharedKeysAreCopiedBeforeAChange: sets sharing a page's keys
// (AddKeys) keep them when one of them changes its own (a key it holds
// dropped, more keys of another source added).
func TestSharedKeysAreCopiedBeforeAChange(t *testing.T) {
	s := func(v string) *string { return &v }
	k := NewKeys([]ledger.Change{{Key: []*string{s("1")}, Bucket: 3}, {Key: []*string{s("2")}, Bucket: 5}, {Key: []*string{s("1")}, Bucket: 3}})
	a, b := NewSet(&catalog.Transform{}), NewSet(&catalog.Transform{})
	a.AddKeys(k)
	b.AddKeys(k)
	if a.Len() != 2 || len(a.keyList()) != 2 {
		t.Fatalf("a shares %d keys (%d listed), want 2", a.Len(), len(a.keyList()))
	}
	a.Add([]*string{s("3")}, 7)
	b.own()
	delete(b.keys, string(ledger.AppendKey(nil, []*string{s("1")})))
	if got := len(k.keys); got != 2 {
		t.Errorf("the shared keys changed: %d, want 2", got)
	}
	if len(k.buckets) != 2 || k.buckets[7] {
		t.Errorf("the shared buckets changed: %v", k.buckets)
	}
	if a.Len() != 3 || len(a.keyList()) != 3 || b.Len() != 1 || len(b.keyList()) != 1 {
		t.Errorf("a has %d keys (%d listed), b %d (%d listed); want 3 and 1", a.Len(), len(a.keyList()), b.Len(), len(b.keyList()))
	}
	c := NewSet(&catalog.Transform{})
	c.Add([]*string{s("9")}, 1)
	c.AddKeys(k)
	if c.Len() != 3 || c.shared != nil {
		t.Errorf("a set with keys of its own takes shared keys as its own: %d keys, shared %v", c.Len(), c.shared != nil)
	}
}
