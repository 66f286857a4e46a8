package grammar

import (
	"fmt"
	"reflect"
	"testing"
)

func TestSplitAggregates(t *testing.T) {
	ref := func(i int, _ AggregateCall) string { return fmt.Sprintf("a%d", i+1) }
	for _, c := range []struct {
		expr, outer string
		calls       []AggregateCall
	}{
		{"count(*)", "a1", []AggregateCall{{Func: "count"}}},
		{"sum(o.price * 2)", "a1", []AggregateCall{{Func: "sum", Arg: "o.price * 2"}}},
		{"coalesce(sum(x), 0) + count(*) - sum(x)", "(COALESCE(a1, 0) + a2) - a1",
			[]AggregateCall{{Func: "sum", Arg: "x"}, {Func: "count"}}},
		{"pg_catalog.avg(x) > 2 AND bool_or(flag)", "a1 > 2 AND a2",
			[]AggregateCall{{Func: "avg", Arg: "x"}, {Func: "bool_or", Arg: "flag"}}},
		{"max(lower(name))", "a1", []AggregateCall{{Func: "max", Arg: "lower(name)"}}},
	} {
		outer, calls, ok := SplitAggregates(c.expr, ref)
		if !ok || outer != c.outer || !reflect.DeepEqual(calls, c.calls) {
			t.Errorf("SplitAggregates(%q) = %q, %v, %v; want %q, %v", c.expr, outer, calls, ok, c.outer, c.calls)
		}
	}
	for _, expr := range []string{
		"count(DISTINCT x)", "string_agg(s, ',')", "sum(x) FILTER (WHERE x > 0)", "array_agg(x ORDER BY x)",
		"percentile_cont(0.5) WITHIN GROUP (ORDER BY x)", "sum(x) + y", "sum(sum(x))", "sum(x) OVER ()",
		"(SELECT 1) + count(*)", "sum((SELECT 1))", "app.sum(x)", "1 + 2", "stddev(x)",
	} {
		if outer, calls, ok := SplitAggregates(expr, ref); ok {
			t.Errorf("SplitAggregates(%q) = %q, %v: want it refused", expr, outer, calls)
		}
	}
}
