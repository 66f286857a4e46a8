package trellis

// The root package's own SQL: the rest lives with the internal packages.
const sqlCurrentDatabase = `SELECT current_database()`
