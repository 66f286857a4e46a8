package grammar

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// A transform's rows are derived when its sources change, never because
// time passes, so a result that depends on the clock (or on the session
// evaluating it) would silently go stale. These are refused by the
// parser: nothing about them needs the database.

// clockFunctions are the built-in functions that read the clock.
var clockFunctions = map[string]bool{
	"now":                   true,
	"transaction_timestamp": true,
	"statement_timestamp":   true,
	"clock_timestamp":       true,
	"timeofday":             true,
}

// sessionFunctions are built-in functions whose result depends on the
// session or transaction evaluating them (the drain worker's), not on
// their arguments: the role, settings, transaction ids, connection.
var sessionFunctions = map[string]bool{
	"current_setting": true, "current_schema": true, "current_schemas": true, "pg_my_temp_schema": true,
	"txid_current": true, "txid_current_if_assigned": true, "txid_current_snapshot": true,
	"pg_current_xact_id": true, "pg_current_xact_id_if_assigned": true, "pg_current_snapshot": true,
	"pg_backend_pid": true, "pg_trigger_depth": true, "pg_postmaster_start_time": true, "pg_conf_load_time": true,
	"inet_client_addr": true, "inet_client_port": true, "inet_server_addr": true, "inet_server_port": true,
	"pg_has_role": true, "row_security_active": true,
}

// sessionMsg is the refusal of something that depends on the session.
func sessionMsg(what string) string {
	return what + " depends on the session that evaluates it (a drain worker's), not on the source rows: a transform cannot use it"
}

// clockMsg is the refusal of something that reads the clock, named as
// written.
func clockMsg(what string) string {
	return what + " reads the clock: a transform derives its rows when its sources change, not as time passes, " +
		"so its result would go stale; compare with a value of the rows instead, or filter when reading the target"
}

// clockCall returns the refusal of a call to a function that reads the
// clock or the session ("" when it does not): the built-ins, unqualified
// or in pg_catalog, and age with one argument (age(current_date, x)).
func clockCall(n *pg.FuncCall) string {
	parts := funcNameParts(n)
	if len(parts) == 0 || len(parts) > 2 || (len(parts) == 2 && parts[0] != "pg_catalog") {
		return ""
	}
	name := parts[len(parts)-1]
	switch {
	case clockFunctions[name]:
		return clockMsg(strings.Join(parts, ".") + "()")
	case name == "age" && len(n.GetArgs()) == 1:
		return clockMsg(strings.Join(parts, ".") + "() with one argument")
	case sessionFunctions[name] || (strings.HasPrefix(name, "has_") && strings.HasSuffix(name, "_privilege")):
		return sessionMsg(strings.Join(parts, ".") + "()")
	}
	return ""
}

// sqlValueMsg is the refusal of an SQL value function: CURRENT_DATE and
// its kin read the clock, CURRENT_USER and its kin the session.
func sqlValueMsg(op pg.SQLValueFunctionOp) string {
	switch op {
	case pg.SQLValueFunctionOp_SVFOP_CURRENT_DATE:
		return clockMsg("CURRENT_DATE")
	case pg.SQLValueFunctionOp_SVFOP_CURRENT_TIME, pg.SQLValueFunctionOp_SVFOP_CURRENT_TIME_N:
		return clockMsg("CURRENT_TIME")
	case pg.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP, pg.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP_N:
		return clockMsg("CURRENT_TIMESTAMP")
	case pg.SQLValueFunctionOp_SVFOP_LOCALTIME, pg.SQLValueFunctionOp_SVFOP_LOCALTIME_N:
		return clockMsg("LOCALTIME")
	case pg.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP, pg.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP_N:
		return clockMsg("LOCALTIMESTAMP")
	}
	return sessionMsg(strings.TrimPrefix(op.String(), "SVFOP_"))
}

// timeWord reports whether a node is a string constant that date and time
// input reads as a moment relative to now ('now', 'today', 'tomorrow',
// 'yesterday', in any case and spacing), and returns its text.
func timeWord(n *pg.Node) (string, bool) {
	c := n.GetAConst()
	if c == nil || c.GetSval() == nil {
		return "", false
	}
	s := c.GetSval().GetSval()
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "now", "today", "tomorrow", "yesterday":
		return s, true
	}
	return "", false
}

// textTypes are the types a time word may be cast to and stay text.
var textTypes = map[string]bool{"text": true, "varchar": true, "bpchar": true, "name": true, "citext": true}

// castKeepsText reports whether a cast's target is a text type.
func castKeepsText(t *pg.TypeName) bool {
	names := t.GetNames()
	if len(names) == 0 || len(t.GetArrayBounds()) > 0 {
		return false
	}
	return textTypes[names[len(names)-1].GetString_().GetSval()]
}

// textOperators are the operators whose operands are JSON or text, never
// dates: a time word beside one stays a string.
var textOperators = map[string]bool{
	"->": true, "->>": true, "#>": true, "#>>": true, "?": true, "?|": true, "?&": true, "||": true,
	"~": true, "~*": true, "!~": true, "!~*": true, "~~": true, "~~*": true, "!~~": true, "!~~*": true,
}

// textOperator tells an operator expression over JSON or text: a LIKE, or
// one of textOperators.
func textOperator(n *pg.A_Expr) bool {
	switch n.GetKind() {
	case pg.A_Expr_Kind_AEXPR_LIKE, pg.A_Expr_Kind_AEXPR_ILIKE, pg.A_Expr_Kind_AEXPR_SIMILAR:
		return true
	case pg.A_Expr_Kind_AEXPR_OP:
		names := n.GetName()
		return len(names) == 1 && textOperators[names[0].GetString_().GetSval()]
	}
	return false
}

// timeWordMsg is the refusal of a time word that may become a date or
// time (a cast to one, or a literal whose type PostgreSQL infers).
func timeWordMsg(s string) string {
	return clockMsg("'"+s+"'") + " (as text, cast it: '" + s + "'::text)"
}

// ClockMessage is the refusal of something that reads the clock, named
// as written ("now()", "CURRENT_DATE", "function f(int), which calls
// now(),").
func ClockMessage(what string) string { return clockMsg(what) }

// clockKeywords are the SQL value functions that read the clock, as
// keywords of the scanner.
var clockKeywords = map[string]string{
	"current_date": "CURRENT_DATE", "current_time": "CURRENT_TIME", "current_timestamp": "CURRENT_TIMESTAMP",
	"localtime": "LOCALTIME", "localtimestamp": "LOCALTIMESTAMP",
}

// ClockIn returns the first thing in the body of a function written in
// SQL or PL/pgSQL that reads the clock ("now()", "CURRENT_TIMESTAMP"),
// or "" when it finds none. It reads tokens, not meaning: a call of a
// clock function, unqualified or in pg_catalog, or a clock keyword,
// outside comments and string literals. A body the scanner cannot read
// yields "".
func ClockIn(body string) string {
	res, err := pgScan(body)
	if err != nil {
		return ""
	}
	toks := res.GetTokens()
	word := func(i int) string {
		if i < 0 || i >= len(toks) {
			return ""
		}
		t := toks[i]
		start, end := int(t.GetStart()), int(t.GetEnd())
		if start < 0 || end > len(body) || start > end {
			return ""
		}
		if t.GetKeywordKind() == pg.KeywordKind_NO_KEYWORD && t.GetToken() != pg.Token_IDENT {
			return ""
		}
		return strings.ToLower(body[start:end])
	}
	for i, t := range toks {
		w := word(i)
		afterDot := i > 0 && toks[i-1].GetToken() == pg.Token_ASCII_46
		if name, ok := clockKeywords[w]; ok && t.GetKeywordKind() != pg.KeywordKind_NO_KEYWORD && !afterDot {
			return name
		}
		if !clockFunctions[w] || i+1 >= len(toks) || toks[i+1].GetToken() != pg.Token_ASCII_40 {
			continue
		}
		if afterDot {
			if word(i-2) != "pg_catalog" {
				continue // another schema's function of that name
			}
			return "pg_catalog." + w + "()"
		}
		return w + "()"
	}
	return ""
}
