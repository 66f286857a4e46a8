// Package trellistype holds Trellis's value types: the results, states,
// enums and error codes that the public package, its internal packages and
// the trellis command share. Each is declared here once; package trellis
// re-exports them under the same names, so most code never imports this
// package. The JSON forms use snake_case names, print every list as an
// array (never null) and an absent value as null, so the CLI's --json, and
// any other printer, show the same thing.
//
// This package imports nothing of Trellis's own: any package may import it.
package trellistype
