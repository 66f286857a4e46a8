package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/ident"
)

// Trellis's own statements have the search_path pg_catalog, pg_temp
// (decision 0030). A key whose type compares with operators of its own
// outside pg_catalog (an extension's type, as citext) is compared through
// them by name: a OPERATOR(schema.=) b, both sides cast to the type the
// operators take, so the only candidate is the exact one in that schema
// and nothing planted beside it can match better. Every comparison of
// key values the generated SQL makes goes through the functions below.

// Op is how the values of a key column compare when the = of their type's
// default btree operator class is not pg_catalog's: the schema of its
// operators and the type they take (a domain's base type). nil is
// pg_catalog's, resolved under the pinned path as written.
type Op struct {
	Schema string `json:"schema"`
	Type   string `json:"type"`
}

// name is the operator op, qualified with o's schema.
func (o *Op) name(op string) string {
	if o == nil {
		return op
	}
	return "OPERATOR(" + ident.Quote(o.Schema) + "." + op + ")"
}

// side is expr as the operand of o's operators: cast to their type.
func (o *Op) side(expr string) string {
	if o == nil {
		return expr
	}
	return "(" + expr + ")::" + o.Type
}

// cmp compares two values of a key column: op is =, <, <=, >, >= or IS
// NOT DISTINCT FROM.
func cmp(a, op, b string, o *Op) string {
	if o == nil {
		return a + " " + op + " " + b
	}
	a, b = o.side(a), o.side(b)
	if op == "IS NOT DISTINCT FROM" {
		return fmt.Sprintf("(%s %s %s OR (%s IS NULL AND %s IS NULL))", a, o.name("="), b, a, b)
	}
	return a + " " + o.name(op) + " " + b
}

// qualified reports whether some column of a key has operators of its own.
func qualified(ops []*Op) bool {
	for _, o := range ops {
		if o != nil {
			return true
		}
	}
	return false
}

// opAt is the i-th of ops, nil past its end (a spec defined before
// operators were recorded).
func opAt(ops []*Op, i int) *Op {
	if i < len(ops) {
		return ops[i]
	}
	return nil
}

// cmpTuple compares two keys column by column, as a row comparison does:
// op is =, <, <=, > or >=.
func cmpTuple(a []string, op string, b []string, ops []*Op) string {
	if len(a) == 1 {
		return cmp(a[0], op, b[0], opAt(ops, 0))
	}
	if !qualified(ops) {
		return keyTuple(a) + " " + op + " " + keyTuple(b)
	}
	if op == "=" {
		parts := make([]string, len(a))
		for i := range a {
			parts[i] = cmp(a[i], "=", b[i], opAt(ops, i))
		}
		return "(" + strings.Join(parts, " AND ") + ")"
	}
	// Ordered: the first column that differs decides; the last one
	// decides with op itself (<= and >= hold for equal keys).
	var ors, eqs []string
	for i := range a {
		o := opAt(ops, i)
		strict := op[:1]
		if i == len(a)-1 {
			strict = op
		}
		ors = append(ors, "("+strings.Join(append(append([]string(nil), eqs...), cmp(a[i], strict, b[i], o)), " AND ")+")")
		eqs = append(eqs, cmp(a[i], "=", b[i], o))
	}
	return "(" + strings.Join(ors, " OR ") + ")"
}

// inQuery is the condition that the key a is one of the rows of query
// (which yields the key's columns, in order).
func inQuery(a []string, query string, ops []*Op) string {
	if !qualified(ops) {
		return keyTuple(a) + " IN (" + query + ")"
	}
	var cols, match []string
	for i := range a {
		c := fmt.Sprintf("trellis_in.c%d", i+1)
		cols = append(cols, fmt.Sprintf("c%d", i+1))
		match = append(match, cmp(a[i], "=", c, opAt(ops, i)))
	}
	from := fmt.Sprintf("(%s) AS trellis_in(%s)", query, strings.Join(cols, ", "))
	if len(a) == 1 {
		o := ops[0]
		return fmt.Sprintf("%s %s ANY (SELECT %s FROM %s)", o.side(a[0]), o.name("="), o.side("trellis_in.c1"), from)
	}
	return fmt.Sprintf("EXISTS (SELECT 1 FROM %s WHERE %s)", from, strings.Join(match, " AND "))
}

// anyOf is the condition that expr equals an element of the array arr,
// whose elements are of the type o.typeOf gives.
func anyOf(expr, arr string, o *Op) string {
	return o.side(expr) + " " + o.name("=") + " ANY (" + arr + ")"
}

// typeOf is the type a key column's values (of type typ) are cast to for
// comparison: the operators' type, or typ itself.
func (o *Op) typeOf(typ string) string {
	if o == nil {
		return typ
	}
	return o.Type
}

// overDomain reports whether o's operators take another type than typ, a
// key column's own type outside pg_catalog: a domain over the operators'
// type (a domain over citext). The domain's owner owns its array type, so
// may create a cast from typ[] to o's type's array: a parameter typed typ[]
// (keyParam) is compared element by element, each cast to o's type (a
// domain's cast to its base type is never a pg_cast entry), never as an
// array coerced whole (opArray).
func (o *Op) overDomain(typ string) bool {
	return o != nil && o.Type != typ && ownParam(typ)
}

// opArray is the parameter $n, values of a key column of type typ, as an
// array of o's operands for anyOf, mentioned as keyParam mentions it when
// o.overDomain(typ).
func opArray(n int, typ string, o *Op) string {
	if o.overDomain(typ) {
		return fmt.Sprintf("ARRAY(SELECT %s FROM unnest(%s) AS trellis_v)", o.side("trellis_v"), keyParam(n, typ))
	}
	return fmt.Sprintf("$%d::%s[]", n, o.typeOf(typ))
}

// EachOn calls fn with every ON condition of the definition (the joins'
// and the semi-joins'), with the positions of the tables whose columns its
// From and Joined name; fn may set the condition's Op.
func (s *Spec) EachOn(fn func(from, joined int, on *JoinOn)) {
	if s.SetOp != nil {
		// A joined branch's positions follow the branches before it.
		base := 0
		for i := range s.SetOp.Branches {
			b := &s.SetOp.Branches[i]
			for k := range b.Joins {
				for c := range b.Joins[k].On {
					fn(base+b.Joins[k].To, base+k+1, &b.Joins[k].On[c])
				}
			}
			for k := range b.Semis {
				for c := range b.Semis[k].On {
					fn(base+b.Semis[k].To, base+1+len(b.Joins)+k, &b.Semis[k].On[c])
				}
			}
			base += 1 + len(b.Joins) + len(b.Semis)
		}
		return
	}
	joins := s.JoinList()
	for i, j := range joins {
		for c := range j.On {
			fn(j.To, i+1, &j.On[c])
		}
	}
	for i := range s.Semis {
		sj := &s.Semis[i]
		for c := range sj.On {
			fn(sj.To, 1+len(joins)+i, &sj.On[c])
		}
	}
}

// OpTypes are the types whose operators SetOps needs: every source's key
// types, the target's key types and the ON columns' types (colType gives
// a column's type at a position of Sources).
func (s *Spec) OpTypes(colType func(pos int, col string) string) []string {
	var out []string
	for _, src := range s.Sources() {
		out = append(out, src.KeyTypes...)
	}
	for _, k := range s.Key {
		out = append(out, k.Type)
	}
	s.EachOn(func(from, joined int, on *JoinOn) {
		out = append(out, colType(from, on.From), colType(joined, on.Joined))
	})
	return out
}

// SetOps records the operators of every key column and ON condition from
// ops (by type, see OpTypes), and OpSchemas as the schemas they name. An
// ON condition gets an operator when both its columns compare with the
// same one.
func (s *Spec) SetOps(ops map[string]*Op, colType func(pos int, col string) string) {
	schemas := map[string]bool{}
	get := func(typ string) *Op {
		o := ops[typ]
		if o != nil {
			schemas[o.Schema] = true
		}
		return o
	}
	keyOps := func(src *Source) {
		src.KeyOps = nil
		all := make([]*Op, len(src.KeyTypes))
		for i, t := range src.KeyTypes {
			all[i] = get(t)
		}
		if qualified(all) {
			src.KeyOps = all
		}
	}
	keyOps(&s.Source)
	if s.SetOp != nil {
		for i := range s.SetOp.Branches {
			b := &s.SetOp.Branches[i]
			keyOps(&b.Source)
			for k := range b.Joins {
				keyOps(&b.Joins[k].Source)
			}
			for k := range b.Semis {
				keyOps(&b.Semis[k].Source)
			}
		}
	}
	for _, j := range s.JoinList() {
		keyOps(&j.Source)
	}
	for i := range s.Semis {
		keyOps(&s.Semis[i].Source)
	}
	for i := range s.Key {
		s.Key[i].Op = get(s.Key[i].Type)
	}
	s.EachOn(func(from, joined int, on *JoinOn) {
		a, b := get(colType(from, on.From)), get(colType(joined, on.Joined))
		on.Op = nil
		if a != nil && b != nil && *a == *b {
			on.Op = a
		}
	})
	s.OpSchemas = nil
	for sc := range schemas {
		s.OpSchemas = append(s.OpSchemas, sc)
	}
	slices.Sort(s.OpSchemas)
}

// OpsUnrecorded reports a definition stored before its key columns'
// operators were recorded, whose keys compare with operators outside
// pg_catalog (OpSchemas): the catalog derives them at load.
func (s *Spec) OpsUnrecorded() bool {
	if len(s.OpSchemas) == 0 {
		return false
	}
	for _, src := range s.Sources() {
		if len(src.KeyOps) > 0 {
			return false
		}
	}
	for _, k := range s.Key {
		if k.Op != nil {
			return false
		}
	}
	recorded := false
	s.EachOn(func(_, _ int, on *JoinOn) { recorded = recorded || on.Op != nil })
	return !recorded
}

// A type outside pg_catalog (an enum, a domain, a composite or range of
// another role's) may gain a cast to or from text at any time, created by
// its owner, and a cast's function runs with the rights of whoever runs
// the statement: the drain's role. So no statement renders a value of such
// a type with a cast (decision 0037): it enters as a parameter of its own
// type, whose text the type's input function reads (keyParam), and leaves
// as the text its output function writes (textOf), the text capture
// records. pg_catalog's types keep their casts: only the bootstrap
// superuser could create one on them.

// userType reports whether typ (as format_type names it under the pinned
// search_path: qualified unless it is pg_catalog's) is outside pg_catalog.
// An unknown type ("", a definition stored before types were recorded)
// keeps the text forms it had.
func userType(typ string) bool {
	return strings.Contains(typ, ".")
}

// ownParam reports whether a parameter array of values of type typ is
// typed typ[] itself: a type outside pg_catalog that is not an array (an
// array of arrays is a two-dimensional array, which cannot hold arrays of
// different lengths, so those stay text[] cast element by element). A
// dropped column's type, marked by a comment (capture.Unrecorded), keeps
// the cast too: it is read only where the definition reads the column.
func ownParam(typ string) bool {
	return userType(typ) && !isArrayType(typ) && !strings.Contains(typ, "/*")
}

// keyParam is the parameter $n, an array of values of type typ: typ[]
// when ownParam, text[] otherwise. Every mention of $n in one statement
// must use it, or the first would type $n and the others cast it.
func keyParam(n int, typ string) string {
	if ownParam(typ) {
		return fmt.Sprintf("$%d::%s[]", n, typ)
	}
	return fmt.Sprintf("$%d::text[]", n)
}

// fromKeyParam is elem, an element of keyParam(_, typ), as a value of typ.
func fromKeyParam(elem, typ string) string {
	switch {
	case ownParam(typ) || typ == "":
		return elem
	case userType(typ):
		return inputOf(elem, typ)
	}
	return elem + "::" + typ
}

// inputOf is the text expr read as a value of typ, a type outside
// pg_catalog whose parameter arrays are text[] (an array type, or a
// dropped column's marked type), by typ's input function, which no cast
// can replace (decision 0041): json_to_record gives a column of a
// declared type that a JSON string fills through the type's input
// function (array_in, calling the element's: enum_in, domain_in,
// record_in). The owner of an element type owns its array type too, so
// may create a cast between it and text; and a parameter array cannot be
// typed with an array type itself, as ownParam's are: an array of arrays
// is one two-dimensional array, whose elements must all have the same
// length. NULL stays NULL.
func inputOf(expr, typ string) string {
	return "(SELECT trellis_in.v FROM pg_catalog.json_to_record(pg_catalog.json_build_object('v', " +
		expr + ")) AS trellis_in(v " + typ + "))"
}

// textOf is the text of expr, a value of type typ, as capture renders it:
// a cast to text for pg_catalog's types, else the type's output function
// (format's %s), with NULL kept NULL (IS NOT DISTINCT FROM NULL tests the
// value itself, also a composite of NULL fields).
func textOf(expr, typ string) string {
	if !userType(typ) {
		return expr + "::text"
	}
	return "CASE WHEN (" + expr + ") IS NOT DISTINCT FROM NULL THEN NULL ELSE pg_catalog.format('%s', " + expr + ") END"
}

// anyOwnParam reports whether a parameter array of one of types is typed
// with its own type (ownParam).
func anyOwnParam(types []string) bool {
	for _, t := range types {
		if ownParam(t) {
			return true
		}
	}
	return false
}

// zipped is the query whose row i holds element i of each parameter array
// (shorter ones padded with NULL), as "SELECT * FROM unnest(a, b, ...)"
// gives, with exprs the select list over the elements: elem(i) names the
// element of array i. Where one array is typed with its own type, unnest
// runs in the select list instead: unnest in FROM expands an element of a
// composite type into its fields, so the names would bind to those.
// Each of exprs begins with its element: only that first mention is
// replaced (a quoted column name may spell an element's name too).
func zipped(arrays []string, elem func(i int) string, exprs []string, typed bool) string {
	if typed {
		out := make([]string, len(exprs))
		for i, e := range exprs {
			out[i] = strings.Replace(e, elem(i), "unnest("+arrays[i]+")", 1)
		}
		return "SELECT " + strings.Join(out, ", ")
	}
	cols := make([]string, len(arrays))
	for i := range arrays {
		cols[i] = strings.TrimPrefix(elem(i), "u.")
	}
	return fmt.Sprintf("SELECT %s FROM unnest(%s) AS u(%s)", strings.Join(exprs, ", "), strings.Join(arrays, ", "), strings.Join(cols, ", "))
}

// unnestParams is "SELECT <elements> FROM ..." over the parameter arrays
// $start.. of the given types, element i of each forming row i, named as
// names (see zipped).
func unnestParams(start int, names, types []string) string {
	var params, cols, elems []string
	for i := range names {
		params = append(params, keyParam(start+i, types[i]))
		cols = append(cols, fmt.Sprintf("x%d", i+1))
		elems = append(elems, fromKeyParam(fmt.Sprintf("u.x%d", i+1), types[i])+" AS "+ident.Quote(names[i]))
	}
	return zipped(params, func(i int) string { return "u." + cols[i] }, elems, anyOwnParam(types))
}

// KeyParamsTyped reports whether text put in place of a parameter of the
// plan's keyed statements, as the catalog's diagnosis probe does, would
// be cast to a type outside pg_catalog: a key parameter typed with its
// key column's own type (see keyParam), or an initial build's cursor
// value of such a type (cursorCols: a parameter of the key's type, read
// by its input function when sent as a parameter).
func (p *Plan) KeyParamsTyped() bool {
	_, types := p.CheckUnit()
	for _, t := range types {
		if ownParam(t) {
			return true
		}
	}
	if p.Kind() == KindProjection {
		for _, t := range p.Spec.Source.KeyTypes {
			if userType(t) {
				return true
			}
		}
	}
	return false
}
