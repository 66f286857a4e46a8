// Package ident quotes SQL identifiers. Every identifier Trellis writes into
// generated SQL goes through Quote or Qualified, never through string
// concatenation of its own.
package ident

import "strings"

// SearchPath is the search_path every connection Trellis opens pins
// (decision 0021): unqualified names resolve in pg_catalog and the
// session's temporary schema only, never in a schema someone could plant
// a shadowing function or operator in.
const SearchPath = "pg_catalog, pg_temp"

// Quote returns name as a PostgreSQL quoted identifier.
func Quote(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// Qualified returns schema.name with both parts quoted.
func Qualified(schema, name string) string {
	return Quote(schema) + "." + Quote(name)
}

// List quotes each name and joins them with ", ".
func List(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = Quote(n)
	}
	return strings.Join(q, ", ")
}

// Literal returns s as a PostgreSQL string literal (for DDL that cannot
// take parameters, such as a NOTIFY channel in a function body).
func Literal(s string) string {
	return `'` + strings.ReplaceAll(s, `'`, `''`) + `'`
}
