package plan

import (
	"fmt"
	"strings"
)

// Two values can be equal and still differ: 10.5 and 10.50, 0 and -0,
// 'alice' and 'Alice' under a nondeterministic collation, two boxes of
// the same area; and some types (json, xml, point) have no = at all. The
// target must hold the value the definition yields, so wherever the
// generated SQL asks whether a value changed it compares identities: the
// text forms, byte for byte, except for the types whose = already means
// identical (and is cheaper).

// equalityIsIdentity are the types whose equal values are the same value.
var equalityIsIdentity = map[string]bool{
	"smallint": true, "integer": true, "bigint": true, "boolean": true, "uuid": true,
	"date": true, "timestamp without time zone": true, "timestamp with time zone": true,
	"time without time zone": true, "bytea": true, "oid": true,
}

// identity is an expression whose = and IS DISTINCT FROM compare the
// identity of a value of type typ: the value itself when its = is
// identity, else its text form under the C collation.
func identity(expr, typ string) string {
	if equalityIsIdentity[typ] {
		return expr
	}
	if userType(typ) {
		return "(" + textOf("("+expr+")", typ) + `) COLLATE "C"`
	}
	return "(" + expr + `)::text COLLATE "C"`
}

// isArrayType tells an array type, whose values an array of them would
// flatten (ARRAY[int[]] is a two-dimensional int[]).
func isArrayType(typ string) bool { return strings.HasSuffix(typ, "]") }

// inParam is the condition that expr is one of the values of the text[]
// parameter $n, cast to typ (compared by o): = ANY of a typed array (an
// index serves it), or for an array type a set of them.
func inParam(expr string, n int, typ string, o *Op) string {
	if isArrayType(typ) {
		return inQuery([]string{"(" + expr + ")"}, fmt.Sprintf("SELECT %s FROM unnest($%d::text[]) AS trellis_v", fromKeyParam("trellis_v", typ), n), []*Op{o})
	}
	return anyOf("("+expr+")", opArray(n, typ, o), o)
}
