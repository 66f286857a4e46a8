package grammar

import (
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// AggregateCall is one aggregate call of an expression that SplitAggregates
// took apart: the aggregate's name (count, sum, avg, min, max, bool_and or
// bool_or) and its argument as SQL ("" for count(*)).
type AggregateCall struct {
	Func string
	Arg  string
}

// partialAggregates are the aggregates a total can be taken of from
// per-range partial results (decision 0051).
var partialAggregates = map[string]bool{
	"count": true, "sum": true, "avg": true, "min": true, "max": true, "bool_and": true, "bool_or": true,
}

// SplitAggregates takes an expression over aggregates apart: outer is expr
// with each aggregate call replaced by a column named ref(i, c) (c the
// call, i its index in calls; calls equal as text share one), and calls
// are the aggregate calls. ok is false when expr holds anything else partial results cannot
// give: another aggregate, DISTINCT, FILTER, ORDER BY or WITHIN GROUP, a
// window function, a subquery, a column outside an aggregate, or an
// aggregate inside another's argument.
func SplitAggregates(expr string, ref func(i int, c AggregateCall) string) (outer string, calls []AggregateCall, ok bool) {
	n, err := parseExpr(expr)
	if err != nil {
		return "", nil, false
	}
	ok = true
	var visit func(m protoreflect.Message)
	visit = func(m protoreflect.Message) {
		if !ok {
			return
		}
		switch v := m.Interface().(type) {
		case *pg.SubLink, *pg.ColumnRef:
			ok = false
			return
		case *pg.Node:
			fc := v.GetFuncCall()
			if fc == nil || !isAggregate(fc) {
				break
			}
			call, good := partialCall(fc)
			if !good {
				ok = false
				return
			}
			i := len(calls)
			for j, c := range calls {
				if c == call {
					i = j
				}
			}
			if i == len(calls) {
				calls = append(calls, call)
			}
			v.Node = &pg.Node_ColumnRef{ColumnRef: &pg.ColumnRef{Fields: []*pg.Node{
				{Node: &pg.Node_String_{String_: &pg.String{Sval: ref(i, call)}}}}, Location: -1}}
			return
		case *pg.FuncCall:
			if v.GetOver() != nil {
				ok = false
				return
			}
		}
		children(m, visit)
	}
	visit(n.ProtoReflect())
	if !ok || len(calls) == 0 {
		return "", nil, false
	}
	if outer, err = deparseExpr(n); err != nil {
		return "", nil, false
	}
	return outer, calls, true
}

// partialCall is fc as an AggregateCall, when it is one partial results
// can give: a plain call of one of partialAggregates (of pg_catalog) on
// one argument that holds no aggregate, window or subquery.
func partialCall(fc *pg.FuncCall) (AggregateCall, bool) {
	parts := funcNameParts(fc)
	name := parts[len(parts)-1]
	if len(parts) > 2 || len(parts) == 2 && parts[0] != "pg_catalog" || !partialAggregates[name] ||
		fc.GetAggDistinct() || len(fc.GetAggOrder()) > 0 || fc.GetAggFilter() != nil || fc.GetAggWithinGroup() ||
		fc.GetOver() != nil || fc.GetFuncVariadic() {
		return AggregateCall{}, false
	}
	if fc.GetAggStar() {
		if name != "count" {
			return AggregateCall{}, false
		}
		return AggregateCall{Func: name}, true
	}
	args := fc.GetArgs()
	if len(args) != 1 || args[0].GetNamedArgExpr() != nil {
		return AggregateCall{}, false
	}
	plain := true
	var visit func(m protoreflect.Message)
	visit = func(m protoreflect.Message) {
		switch v := m.Interface().(type) {
		case *pg.SubLink:
			plain = false
		case *pg.FuncCall:
			if isAggregate(v) || v.GetOver() != nil {
				plain = false
			}
		}
		if plain {
			children(m, visit)
		}
	}
	visit(args[0].ProtoReflect())
	if !plain {
		return AggregateCall{}, false
	}
	arg, err := deparseExpr(args[0])
	if err != nil {
		return AggregateCall{}, false
	}
	return AggregateCall{Func: name, Arg: arg}, true
}
