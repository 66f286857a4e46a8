package capture

import "strings"

// unrecordedMark is appended to the type (in sources.cap_types) of a
// captured column that was dropped from its table: capture records NULL in
// its place instead of failing every write to the table. The column keeps
// its name and its place in the ledger's vals, so rows captured before and
// after are read the same way, and the drain's casts of it stay valid SQL
// (the mark is a comment).
const unrecordedMark = " /* trellis: not recorded, the column was dropped */"

// Unrecorded marks a captured column's type as no longer recorded.
func Unrecorded(typ string) string {
	if IsUnrecorded(typ) {
		return typ
	}
	return typ + unrecordedMark
}

// IsUnrecorded reports whether a captured column's type is marked as no
// longer recorded.
func IsUnrecorded(typ string) bool { return strings.HasSuffix(typ, unrecordedMark) }

// UnrecordedMark is the mark Unrecorded appends, for SQL that looks for it.
func UnrecordedMark() string { return unrecordedMark }
