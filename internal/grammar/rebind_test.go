package grammar

import "testing"

func TestRebind(t *testing.T) {
	in := `SELECT $1::int[], '$2 stays', "$3" FROM t WHERE a = $2 -- $1 in a comment
AND b = $$ $1 $$ AND c = $10`
	got, err := Rebind(in, func(n int) string { return map[int]string{1: "(ARRAY[$1[1]])", 2: "'x'", 10: "NULL"}[n] })
	if err != nil {
		t.Fatal(err)
	}
	want := `SELECT (ARRAY[$1[1]])::int[], '$2 stays', "$3" FROM t WHERE a = 'x' -- $1 in a comment
AND b = $$ $1 $$ AND c = NULL`
	if got != want {
		t.Fatalf("Rebind:\n got %s\nwant %s", got, want)
	}
}
