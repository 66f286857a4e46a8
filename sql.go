package trellis

// The root package's own SQL: the rest lives with the internal packages.
const sqlCurrentDatabase = `SELECT current_database()`

// sqlShowSearchPath reads a session's search_path (definerPath).
const sqlShowSearchPath = `SHOW search_path`
