package recompute

import "testing"

func TestRenderKeyIsOneToOne(t *testing.T) {
	str := func(s string) *string { return &s }
	keys := [][]*string{
		{nil}, {str("NULL")}, {str("")}, {str(`"NULL"`)}, {str("42")}, {str("a b")},
		{nil, str("x")}, {str(""), str("x")}, {str("NULL"), str("x")}, {str("a,b"), nil}, {str("a"), str("b,")},
		{str(`"`), nil}, {str(`\\`), nil},
	}
	want := []string{
		"NULL", `"NULL"`, `""`, `"""NULL"""`, "42", "a b",
		"(,x)", `("",x)`, "(NULL,x)", `("a,b",)`, `(a,"b,")`,
		`("""",)`, `("\\\\",)`,
	}
	seen := map[string]int{}
	for i, k := range keys {
		got := RenderKey(k)
		if got != want[i] {
			t.Errorf("RenderKey(%d) = %s, want %s", i, got, want[i])
		}
		if j, dup := seen[got]; dup {
			t.Errorf("keys %d and %d both render as %s", j, i, got)
		}
		seen[got] = i
	}
}
