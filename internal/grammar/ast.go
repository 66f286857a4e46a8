// Package grammar parses Trellis statements (TRANSFORM, PAUSE, RESUME, DROP,
// ALTER) into a small AST. The SQL parts of a statement (select expressions,
// WHERE, GROUP BY, JOIN conditions) are validated with PostgreSQL's own
// parser and carried as canonical SQL text produced by its deparser.
package grammar

// Name is a possibly schema-qualified object name. Identifiers are already
// normalised the way PostgreSQL does it: unquoted ones are folded to lower
// case, quoted ones keep their case with doubled quotes undone.
type Name struct {
	Schema string // "" when the statement did not qualify the name
	Name   string
}

// String renders the name for messages (not for SQL: quote with ident).
func (n Name) String() string {
	if n.Schema == "" {
		return n.Name
	}
	return n.Schema + "." + n.Name
}

// Statement is one parsed statement: *Transform, *Pause, *Resume, *Drop or *Alter.
type Statement interface{ statement() }

// TableRef is a table in a FROM or JOIN clause with its optional alias.
type TableRef struct {
	Table Name
	Alias string // "" when none was given
}

// JoinKind tells inner, left, right and full joins apart.
type JoinKind string

// Join kinds. A RIGHT JOIN of the first two tables is parsed as the LEFT
// JOIN it stands for, with the two tables swapped (Transform.Swapped); a
// Transform never holds JoinRight once parsed.
const (
	JoinInner JoinKind = "inner"
	JoinLeft  JoinKind = "left"
	JoinRight JoinKind = "right"
	// JoinFull is FULL [OUTER] JOIN, of two tables on equalities.
	JoinFull JoinKind = "full"
)

// ColumnRef is a column reference as written: an optional qualifier (table
// name or alias) and the column name.
type ColumnRef struct {
	Qualifier string
	Column    string
}

// String renders the reference for messages: qualifier.column or column.
func (r ColumnRef) String() string {
	if r.Qualifier == "" {
		return r.Column
	}
	return r.Qualifier + "." + r.Column
}

// JoinCond is one equality of an ON clause: Left = Right.
type JoinCond struct {
	Left  ColumnRef
	Right ColumnRef
}

// Join is one JOIN clause, or one more table of a comma-separated FROM
// list.
type Join struct {
	Kind  JoinKind
	Table TableRef
	On    []JoinCond // one or more equalities joined by AND
	// Using are the columns of JOIN ... USING (...); On then holds the
	// equalities they stand for, and unqualified references to them in
	// the statement's SQL parts read the FROM table's column.
	Using []string
	// Comma says the table came in a comma-separated FROM list: On is
	// empty, and the join's equalities are found among WhereConjuncts
	// once the tables' columns are known (plan.Resolve).
	Comma bool
}

// SubJoin is a semi-join (EXISTS, IN) or an anti-join (NOT EXISTS, NOT IN)
// of WHERE: one top-level AND part of it, taken out of Transform.Where.
type SubJoin struct {
	Anti bool // NOT EXISTS, NOT IN
	In   bool // IN (SELECT u.x ...): its NULLs follow SQL's IN
	// Table is the subquery's one table.
	Table TableRef
	// On are the correlations: Left a column of Table, Right a column of
	// the outer tables (for IN, the first is the compared pair).
	On []JoinCond
	// Where is the canonical SQL of the subquery's other conditions, which
	// read only Table's columns ("" when none).
	Where        string
	WhereColumns []ColumnRef
	funcs        []located[string]
}

// Conjunct is one top-level AND part of a WHERE clause.
type Conjunct struct {
	SQL     string      // canonical SQL of the part
	Columns []ColumnRef // columns the part reads
	// Equality is set when the part is column = column.
	Equality *JoinCond
}

// SelectItem is one `expr AS name` of the select list.
type SelectItem struct {
	Expr         string      // canonical SQL of the expression (deparsed by PostgreSQL's deparser)
	Name         string      // the output column name, normalised
	HasAggregate bool        // the expression calls an aggregate (by name or by aggregate syntax)
	Columns      []ColumnRef // the column references the expression reads, in order of appearance, deduplicated
	// Star is `*` (StarOf "") or `t.*` (StarOf "t"): it stands for the
	// columns of the tables (or of t), expanded once their columns are
	// known (plan.Resolve); Expr and Name are empty.
	Star   bool
	StarOf string
}

// WindowCall is one window function call of the select list: `f(...)
// OVER (PARTITION BY ... ORDER BY ... frame)`.
type WindowCall struct {
	Output string // the name of the select item it is in
	Func   string // the function's name, its last part ("row_number", "sum")
	Name   string // the function's name as written ("pg_catalog.sum")
	// Partition are the canonical SQL of its PARTITION BY expressions,
	// PartitionColumns the columns they read.
	Partition        []string
	PartitionColumns []ColumnRef
	// OrderColumns are the ORDER BY items that are plain column
	// references (nil for an item that is not), in order.
	OrderColumns []*ColumnRef
	// Ordered says it has an ORDER BY; Rows that its frame counts rows
	// (ROWS), not peers (RANGE, GROUPS).
	Ordered bool
	Rows    bool
	// Aggregate says the function is an aggregate used as a window.
	Aggregate bool
}

// Transform is `TRANSFORM target FROM source ... SELECT ...`.
type Transform struct {
	Target         Name
	From           TableRef
	Joins          []Join
	Select         []SelectItem
	Where          string      // canonical SQL of the predicate, "" when none
	WhereColumns   []ColumnRef // columns the predicate reads
	GroupBy        []string    // canonical SQL of each GROUP BY expression
	GroupByColumns []ColumnRef // columns the GROUP BY expressions read
	// Having is the canonical SQL of the HAVING condition, "" when none.
	Having        string
	HavingColumns []ColumnRef
	// Distinct is SELECT DISTINCT.
	Distinct bool
	// SubJoins are the semi- and anti-joins of WHERE, taken out of Where.
	SubJoins []SubJoin
	// WhereConjuncts are the top-level AND parts of WHERE, set when a
	// comma join needs its equalities from there.
	WhereConjuncts []Conjunct
	// Windows are the window function calls of the select list, and
	// WindowFunctions the functions they call as written (as in
	// Functions, which lists them too).
	Windows         []WindowCall
	WindowFunctions []string
	// DistinctOn are the canonical SQL of SELECT DISTINCT ON's
	// expressions, DistinctOnColumns the columns they read.
	DistinctOn        []string
	DistinctOnColumns []ColumnRef
	DistinctOnPlain   []*ColumnRef // each expression's plain column reference, nil when it is not one
	// OrderBy are ORDER BY's items (canonical SQL, with DESC, NULLS ...
	// as written), OrderByColumns the columns they read; Limit is LIMIT's
	// row count (0 when there is none).
	OrderBy        []string
	OrderByColumns []ColumnRef
	OrderByPlain   []*ColumnRef // each item's plain column reference, nil when it is not one
	Limit          int64
	// RankOutput is the output of a top-k over a derived table (`FROM
	// (SELECT ..., row_number() OVER (...) AS rn FROM t) s SELECT * WHERE
	// rn <= k`): the rows kept are those whose RankOutput is at most
	// Limit.
	RankOutput string
	// Swapped says the statement was written `a RIGHT JOIN b`: From is b
	// and Joins[0] the LEFT JOIN of a, and `*` lists a's columns first,
	// as PostgreSQL does for what was written.
	Swapped            bool
	WithoutSourceIndex bool
	// SetOp is set when the statement is a set operation (UNION [ALL],
	// INTERSECT, EXCEPT): the transform is its first branch.
	SetOp     *SetOp
	Functions []string // every function the SQL parts call, as written ("lower", "pg_catalog.lower"), deduplicated
}

// Address names a transform or one of its columns in PAUSE and RESUME:
// Parts holds 1 to 3 normalised identifiers ("t", "t.col" or "s.t",
// "s.t.col"); a two-part address is resolved by the engine.
type Address struct {
	Parts []string
}

// Pause is `PAUSE TRANSFORM target[.column]`.
type Pause struct{ Address Address }

// Resume is `RESUME TRANSFORM target[.column]`.
type Resume struct{ Address Address }

// Drop is `DROP TRANSFORM target`.
type Drop struct{ Target Name }

// AlterAction is what an ALTER TRANSFORM does.
type AlterAction string

// Alter actions.
const (
	AlterAddColumn  AlterAction = "add_column"
	AlterDropColumn AlterAction = "drop_column"
)

// Alter is `ALTER TRANSFORM target ADD COLUMN expr AS name` or
// `ALTER TRANSFORM target DROP COLUMN name`.
type Alter struct {
	Target Name
	Action AlterAction
	Column SelectItem // for ADD COLUMN: the expression and name; for DROP COLUMN: Name only
	// Functions are the functions the new column's expression calls, as
	// in Transform.Functions.
	Functions []string
	// Bare are the column references of the new column read outside any
	// aggregate call (a GROUP BY transform's new column has none).
	Bare []ColumnRef
}

// Aggregated tells whether the transform aggregates: it has GROUP BY,
// HAVING or an aggregate call (without GROUP BY, one group of every row).
func (t *Transform) Aggregated() bool {
	if len(t.GroupBy) > 0 || t.Having != "" {
		return true
	}
	for _, it := range t.Select {
		if it.HasAggregate {
			return true
		}
	}
	return false
}

func (*Transform) statement() {}
func (*Pause) statement()     {}
func (*Resume) statement()    {}
func (*Drop) statement()      {}
func (*Alter) statement()     {}

// ErrorKind separates statements that do not parse from statements that
// parse but are not allowed.
type ErrorKind string

// Error kinds.
const (
	Syntax  ErrorKind = "syntax"  // the text is not a statement of the grammar
	Invalid ErrorKind = "invalid" // it parses, but a rule forbids it (subquery, window function, ...)
)

// Error is a statement that is refused, with where: 1-based line and column
// in the statement text, and the token found there ("end of input" past the end).
type Error struct {
	Kind   ErrorKind
	Line   int
	Column int
	Token  string
	Msg    string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return e.Msg + " at line " + itoa(e.Line) + ", column " + itoa(e.Column) + " (near " + quoteToken(e.Token) + ")"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

func quoteToken(t string) string {
	if t == "end of input" {
		return t
	}
	return "\"" + t + "\""
}
