package grammar

import (
	"bytes"
	"fmt"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// isAggregateName tells whether an unqualified function name is one of
// PostgreSQL's built-in aggregates (or of their families: stddev*,
// variance*, covar_*, regr_*, percentile_*).
func isAggregateName(name string) bool {
	switch name {
	case "count", "sum", "avg", "min", "max", "bool_and", "bool_or", "every",
		"string_agg", "array_agg", "json_agg", "jsonb_agg", "json_object_agg",
		"jsonb_object_agg", "json_agg_strict", "jsonb_agg_strict",
		"json_object_agg_strict", "jsonb_object_agg_strict",
		"json_object_agg_unique", "jsonb_object_agg_unique",
		"json_object_agg_unique_strict", "jsonb_object_agg_unique_strict",
		"xmlagg", "bit_and", "bit_or", "bit_xor", "var_pop", "var_samp", "corr",
		"mode", "range_agg", "range_intersect_agg", "any_value":
		return true
	}
	for _, prefix := range []string{"stddev", "variance", "covar_", "regr_", "percentile_"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// isAggregate tells whether a function call is an aggregate: by aggregate
// syntax (count(*), DISTINCT, ORDER BY, FILTER, WITHIN GROUP) or by name.
func isAggregate(fc *pg.FuncCall) bool {
	if fc.GetAggStar() || fc.GetAggDistinct() || len(fc.GetAggOrder()) > 0 || fc.GetAggFilter() != nil || fc.GetAggWithinGroup() {
		return true
	}
	parts := funcNameParts(fc)
	return len(parts) > 0 && isAggregateName(parts[len(parts)-1])
}

func funcNameParts(fc *pg.FuncCall) []string {
	parts := make([]string, 0, len(fc.GetFuncname()))
	for _, n := range fc.GetFuncname() {
		parts = append(parts, n.GetString_().GetSval())
	}
	return parts
}

// located is something found at a byte offset of the parsed query.
type located[T any] struct {
	loc int
	val T
}

// walker collects what an expression reads and calls, and the first
// (leftmost) thing in it that a transform does not allow.
type walker struct {
	aggMsg    string // message when aggregates are not allowed here, "" when they are
	windowsOK bool   // window functions are allowed here (the select list)
	alter     bool   // the part is ALTER TRANSFORM's new column
	windows   []located[WindowCall]
	inWindow  bool // inside a window function's arguments or window

	cols   []located[ColumnRef]
	funcs  []located[string]
	aggLoc int // location of the first aggregate, -1 when none

	errLoc int
	errMsg string
}

func newWalker(aggMsg string) *walker {
	return &walker{aggMsg: aggMsg, aggLoc: -1, errLoc: -1}
}

func (w *walker) fail(loc int, msg string) {
	if w.errMsg == "" || (loc >= 0 && (w.errLoc < 0 || loc < w.errLoc)) {
		w.errLoc, w.errMsg = loc, msg
	}
}

// location returns a node's location field, or -1 when it has none.
func location(m protoreflect.Message) int {
	fd := m.Descriptor().Fields().ByName("location")
	if fd == nil || fd.Kind() != protoreflect.Int32Kind {
		return -1
	}
	return int(m.Get(fd).Int())
}

// children calls f for every message directly below m, in field order.
func children(m protoreflect.Message, f func(protoreflect.Message)) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Message() == nil || fd.IsMap() || !m.Has(fd) {
			continue
		}
		if fd.IsList() {
			l := m.Get(fd).List()
			for j := 0; j < l.Len(); j++ {
				f(l.Get(j).Message())
			}
			continue
		}
		f(m.Get(fd).Message())
	}
}

// walk visits m; loc is the nearest known location above it, inAgg whether
// m is inside an aggregate's arguments.
func (w *walker) walk(m protoreflect.Message, loc int, inAgg bool) {
	if l := location(m); l >= 0 {
		loc = l
	}
	switch n := m.Interface().(type) {
	case *pg.SubLink:
		if n.GetSubselect().GetSelectStmt().GetWithClause() != nil {
			w.fail(loc, "WITH queries are not allowed in a transform")
			return
		}
		w.fail(loc, "subqueries are not allowed in a transform (except [NOT] EXISTS (SELECT ...) and col [NOT] IN (SELECT ...) as top-level AND parts of WHERE)")
		return
	case *pg.SelectStmt:
		w.fail(loc, "subqueries are not allowed in a transform")
		return
	case *pg.ParamRef:
		w.fail(loc, "parameters ($n) are not allowed in a transform")
		return
	case *pg.GroupingFunc:
		w.fail(loc, "GROUPING is not supported in a transform")
		return
	case *pg.A_Star:
		w.fail(loc, "* is not allowed here: name the columns")
		return
	case *pg.ColumnRef:
		w.columnRef(n, loc)
		return
	case *pg.FuncCall:
		w.funcCall(n, loc, inAgg)
		return
	case *pg.SQLValueFunction:
		w.fail(loc, sqlValueMsg(n.GetOp()))
		return
	case *pg.TypeCast:
		if s, ok := timeWord(n.GetArg()); ok {
			if !castKeepsText(n.GetTypeName()) {
				w.fail(int(n.GetArg().GetAConst().GetLocation()), timeWordMsg(s))
			}
			return
		}
	case *pg.A_Expr:
		if textOperator(n) {
			// A time word beside a JSON or text operator is text (a key
			// named 'today'), never a date.
			for _, side := range []*pg.Node{n.GetLexpr(), n.GetRexpr()} {
				if _, ok := timeWord(side); !ok && side != nil {
					w.walk(side.ProtoReflect(), loc, inAgg)
				}
			}
			return
		}
	case *pg.A_Const:
		if s, ok := timeWord(&pg.Node{Node: &pg.Node_AConst{AConst: n}}); ok {
			w.fail(loc, timeWordMsg(s))
		}
		return
	}
	children(m, func(c protoreflect.Message) { w.walk(c, loc, inAgg) })
}

func (w *walker) columnRef(n *pg.ColumnRef, loc int) {
	fields := n.GetFields()
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		if f.GetAStar() != nil {
			w.fail(loc, "* is not allowed in a transform: name the columns (count(*) is fine)")
			return
		}
		s := f.GetString_()
		if s == nil {
			w.fail(loc, "unsupported column reference")
			return
		}
		parts = append(parts, s.GetSval())
	}
	if len(parts) == 0 {
		w.fail(loc, "unsupported column reference")
		return
	}
	ref := ColumnRef{Qualifier: strings.Join(parts[:len(parts)-1], "."), Column: parts[len(parts)-1]}
	w.cols = append(w.cols, located[ColumnRef]{loc, ref})
}

func (w *walker) funcCall(n *pg.FuncCall, loc int, inAgg bool) {
	if n.GetOver() != nil {
		w.windowCall(n, loc, inAgg)
		return
	}
	if msg := clockCall(n); msg != "" {
		w.fail(loc, msg)
		return
	}
	w.funcs = append(w.funcs, located[string]{loc, strings.Join(funcNameParts(n), ".")})
	agg := isAggregate(n)
	if agg {
		switch {
		case w.aggMsg != "":
			w.fail(loc, w.aggMsg)
			return
		case inAgg:
			w.fail(loc, "aggregate calls cannot be nested")
			return
		}
		if w.aggLoc < 0 || loc < w.aggLoc {
			w.aggLoc = loc
		}
	}
	for _, a := range n.GetArgs() {
		w.walk(a.ProtoReflect(), loc, inAgg || agg)
	}
	for _, a := range n.GetAggOrder() {
		w.walk(a.ProtoReflect(), loc, inAgg || agg)
	}
	if f := n.GetAggFilter(); f != nil {
		w.walk(f.ProtoReflect(), loc, inAgg || agg)
	}
}

// windowCall records a window function call of the select list, or
// refuses it where windows cannot be: outside the select list, nested,
// inside an aggregate, or naming a window (Trellis has no WINDOW clause).
func (w *walker) windowCall(n *pg.FuncCall, loc int, inAgg bool) {
	over := n.GetOver()
	switch {
	case !w.windowsOK && w.alter:
		w.fail(loc, "ALTER TRANSFORM ... ADD COLUMN cannot add a window function: define the transform again with it")
		return
	case !w.windowsOK:
		w.fail(loc, "window functions are allowed only in the select list of a transform")
		return
	case w.inWindow:
		w.fail(loc, "window function calls cannot be nested")
		return
	case inAgg:
		w.fail(loc, "window functions cannot be inside an aggregate")
		return
	case over.GetRefname() != "" || over.GetName() != "":
		w.fail(loc, "named windows are not supported (a transform has no WINDOW clause): write the window in OVER (...)")
		return
	}
	if msg := clockCall(n); msg != "" {
		w.fail(loc, msg)
		return
	}
	parts := funcNameParts(n)
	w.funcs = append(w.funcs, located[string]{loc, strings.Join(parts, ".")})
	call := WindowCall{Name: strings.Join(parts, "."), Aggregate: isAggregate(n), Ordered: len(over.GetOrderClause()) > 0, Rows: over.GetFrameOptions()&frameRows != 0}
	if len(parts) > 0 {
		call.Func = parts[len(parts)-1]
	}
	for _, pn := range over.GetPartitionClause() {
		sql, err := deparseExpr(pn)
		if err != nil {
			w.fail(loc, "PostgreSQL cannot print a PARTITION BY expression back as SQL; write it differently")
			return
		}
		call.Partition = append(call.Partition, sql)
		sub := newWalker("")
		sub.walk(pn.ProtoReflect(), loc, false)
		for _, c := range sub.cols {
			call.PartitionColumns = appendUnique(call.PartitionColumns, c.val)
		}
	}
	for _, o := range over.GetOrderClause() {
		var ref *ColumnRef
		if c, ok := plainColumn(o.GetSortBy().GetNode()); ok {
			ref = &c
		}
		call.OrderColumns = append(call.OrderColumns, ref)
	}
	w.windows = append(w.windows, located[WindowCall]{loc, call})
	w.inWindow = true
	defer func() { w.inWindow = false }()
	children(n.ProtoReflect(), func(c protoreflect.Message) { w.walk(c, loc, inAgg) })
}

// frameRows is PostgreSQL's FRAMEOPTION_ROWS: the frame counts rows.
const frameRows = 0x4

// deparseExpr prints one expression back as canonical SQL.
func deparseExpr(n *pg.Node) (string, error) {
	tree := &pg.ParseResult{Stmts: []*pg.RawStmt{{Stmt: &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: &pg.SelectStmt{
		TargetList:  []*pg.Node{{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: n}}}},
		LimitOption: pg.LimitOption_LIMIT_OPTION_DEFAULT, Op: pg.SetOperation_SETOP_NONE,
	}}}}}}
	sql, err := pgDeparse(tree)
	if err != nil || !strings.HasPrefix(sql, selectPrefix) {
		return "", fmt.Errorf("cannot deparse: %v", err)
	}
	return strings.TrimPrefix(sql, selectPrefix), nil
}

// ungrouped returns the first column reference in m that is neither inside
// an aggregate nor inside a sub-expression equal to one of groups, with its
// location; nil when there is none.
func ungrouped(m protoreflect.Message, groups []*pg.Node, loc int) (*pg.ColumnRef, int) {
	if l := location(m); l >= 0 {
		loc = l
	}
	switch n := m.Interface().(type) {
	case *pg.Node:
		for _, g := range groups {
			if equalIgnoringLocation(m, g.ProtoReflect()) {
				return nil, loc
			}
		}
	case *pg.FuncCall:
		if isAggregate(n) {
			return nil, loc
		}
	case *pg.ColumnRef:
		return n, loc
	}
	var found *pg.ColumnRef
	foundLoc := loc
	children(m, func(c protoreflect.Message) {
		if found == nil {
			found, foundLoc = ungrouped(c, groups, loc)
		}
	})
	return found, foundLoc
}

// bareColumns appends to out the column references in m that are not
// inside an aggregate call, deduplicated, in tree order.
func bareColumns(m protoreflect.Message, out []ColumnRef) []ColumnRef {
	switch n := m.Interface().(type) {
	case *pg.FuncCall:
		if isAggregate(n) {
			return out
		}
	case *pg.ColumnRef:
		if c, ok := plainColumn(&pg.Node{Node: &pg.Node_ColumnRef{ColumnRef: n}}); ok {
			out = appendUnique(out, c)
		}
		return out
	}
	children(m, func(c protoreflect.Message) { out = bareColumns(c, out) })
	return out
}

// equalIgnoringLocation compares two parse trees, ignoring where in the
// text their nodes were found.
func equalIgnoringLocation(a, b protoreflect.Message) bool {
	if a.Descriptor().FullName() != b.Descriptor().FullName() {
		return false
	}
	fields := a.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Name() == "location" {
			continue
		}
		if a.Has(fd) != b.Has(fd) {
			return false
		}
		if !a.Has(fd) {
			continue
		}
		va, vb := a.Get(fd), b.Get(fd)
		switch {
		case fd.IsMap():
			return false // parse trees have no maps; be conservative
		case fd.IsList():
			la, lb := va.List(), vb.List()
			if la.Len() != lb.Len() {
				return false
			}
			for j := 0; j < la.Len(); j++ {
				if !equalValue(fd, la.Get(j), lb.Get(j)) {
					return false
				}
			}
		default:
			if !equalValue(fd, va, vb) {
				return false
			}
		}
	}
	return true
}

func equalValue(fd protoreflect.FieldDescriptor, a, b protoreflect.Value) bool {
	switch {
	case fd.Message() != nil:
		return equalIgnoringLocation(a.Message(), b.Message())
	case fd.Kind() == protoreflect.BytesKind:
		return bytes.Equal(a.Bytes(), b.Bytes())
	default:
		return a.Interface() == b.Interface()
	}
}

// minLocation returns the smallest location in the tree below m, or -1.
func minLocation(m protoreflect.Message) int {
	best := location(m)
	children(m, func(c protoreflect.Message) {
		if l := minLocation(c); l >= 0 && (best < 0 || l < best) {
			best = l
		}
	})
	return best
}
