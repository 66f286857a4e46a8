package trellistype

// Code classifies an error. The set is closed: these constants are all the
// codes Trellis returns.
type Code string

// The error codes.
const (
	// CodeParse: the statement does not parse; nothing was applied.
	CodeParse Code = "parse"
	// CodeValidation: the request is not allowed (a rule of the grammar, a
	// source without a primary key, a closed client, ...); nothing was applied.
	CodeValidation Code = "validation"
	// CodeNotFound: the named transform, key or catalog does not exist.
	CodeNotFound Code = "not_found"
	// CodeConflict: the request conflicts with the database's state (a target
	// that exists, a second staging worker, a dependent transform).
	CodeConflict Code = "conflict"
	// CodeTimeout: the call did not finish within its deadline; the work it
	// started on the server was cancelled and rolled back.
	CodeTimeout Code = "timeout"
	// CodeUnavailable: the database cannot be reached.
	CodeUnavailable Code = "unavailable"
	// CodeInternal: anything else; the message says what was being done.
	CodeInternal Code = "internal"
)
