package grammar

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Parenthesized joins (decision 0045): `a JOIN (b JOIN c ON ..) ON ..` is
// taken where it equals the flat join list `a JOIN b ON .. JOIN c ON ..`,
// which is what the engine maintains: the FROM clause is rewritten so and
// the statement parsed again. Re-associating `A op1 (B op2 C ON p2) ON
// p1` into `(A op1 B ON p1) op2 C ON p2` keeps the result when p1 reads
// only A's tables and B, and: op1 is an inner join and op2 an inner or
// left join, or both are left joins (p2, an equality, is null-rejecting
// on B). Anything else is refused naming the rewrite.

// parenJoinRefusal is the rewrite a refused parenthesized join names.
const parenJoinRefusal = "write the joins one after another, each ON comparing its table with one table before it (FROM a JOIN b ON ... LEFT JOIN c ON ...), or define the parenthesized join as a transform and join its target"

// parenJoinAt finds, in the FROM clause from token i on, the first
// parenthesized join, a "(" after FROM or JOIN that opens no query (-1
// when there is none), and the index of the SELECT that ends the clause.
func (p *stmtParser) parenJoinAt(i int) (paren, sel int) {
	depth, paren := 0, -1
	for k := i; k < p.n; k++ {
		switch p.toks[k].kind {
		case pg.Token_ASCII_40:
			if depth == 0 && (k == i || p.is(k-1, "join")) && k+1 < p.n &&
				!p.is(k+1, "select") && !p.is(k+1, "with") && !p.is(k+1, "values") && !p.isKind(k+1, pg.Token_ASCII_40) {
				if paren < 0 {
					paren = k
				}
			}
			depth++
		case pg.Token_ASCII_41:
			depth--
		default:
			if depth == 0 && p.is(k, "select") {
				return paren, k
			}
		}
	}
	return -1, -1
}

// flattenParenJoins rewrites the FROM clause starting at p.pos, when it
// holds a parenthesized join, into the flat join list it equals, and
// lexes the statement again (p.pos keeps its place). It reports whether
// it rewrote anything.
func (p *stmtParser) flattenParenJoins() (bool, *Error) {
	paren, sel := p.parenJoinAt(p.pos)
	if paren < 0 || sel < 0 {
		return false, nil
	}
	at := p.pos
	start, end := p.toks[at].start, p.toks[sel].start
	const prefix = "SELECT FROM "
	tree, err := pgParse(prefix + p.text[start:end])
	if err != nil {
		return false, p.pgError(err, start, end, prefix, "the FROM clause")
	}
	st := tree.GetStmts()[0].GetStmt().GetSelectStmt()
	if st == nil || len(st.GetFromClause()) != 1 {
		return false, p.errAt(Invalid, paren, "a parenthesized join after a comma is not supported: "+parenJoinRefusal)
	}
	flat, why := flattenJoin(st.FromClause[0])
	if why != "" {
		return false, p.errAt(Invalid, paren, why+": "+parenJoinRefusal)
	}
	st.FromClause[0] = flat
	out, err := pgDeparse(tree)
	if err != nil || !strings.HasPrefix(out, prefix) {
		return false, p.errAt(Invalid, paren, "PostgreSQL cannot print the FROM clause back as SQL: "+parenJoinRefusal)
	}
	src, e := lex(p.text[:start] + strings.TrimPrefix(out, prefix) + " " + p.text[end:])
	if e != nil {
		return false, e
	}
	p.source = src
	p.pos = at
	return true, nil
}

// flattenJoin re-associates a join tree into a left-deep one (each join's
// right side a table), or says why it cannot.
func flattenJoin(n *pg.Node) (*pg.Node, string) {
	j := n.GetJoinExpr()
	if j == nil {
		return n, ""
	}
	if j.GetAlias() != nil {
		return nil, "a parenthesized join with an alias is not supported"
	}
	l, why := flattenJoin(j.GetLarg())
	if why != "" {
		return nil, why
	}
	r, why := flattenJoin(j.GetRarg())
	if why != "" {
		return nil, why
	}
	j.Larg, j.Rarg = l, r
	rj := r.GetJoinExpr()
	if rj == nil {
		return n, ""
	}
	// r is left-deep: its bottom join's left side is its first table.
	bottom := rj
	for bottom.GetLarg().GetJoinExpr() != nil {
		bottom = bottom.GetLarg().GetJoinExpr()
	}
	first := bottom.GetLarg()
	switch {
	case j.GetJointype() != pg.JoinType_JOIN_INNER && j.GetJointype() != pg.JoinType_JOIN_LEFT:
		return nil, "a RIGHT or FULL JOIN of a parenthesized join is not supported"
	case len(j.GetUsingClause()) > 0 || j.GetIsNatural():
		return nil, "a parenthesized join joined with USING is not supported (name the columns in ON)"
	}
	for x := rj; ; x = x.GetLarg().GetJoinExpr() {
		switch x.GetJointype() {
		case pg.JoinType_JOIN_INNER:
			if j.GetJointype() == pg.JoinType_JOIN_LEFT {
				return nil, "a LEFT JOIN of a parenthesized inner join is not supported (it keeps a row without the pair that joins flat would drop)"
			}
		case pg.JoinType_JOIN_LEFT:
		default:
			return nil, "a RIGHT or FULL JOIN inside a parenthesized join is not supported"
		}
		if x == bottom {
			break
		}
	}
	allowed := aliasesOf(l)
	allowed = append(allowed, aliasesOf(first)...)
	if why := onReads(j.GetQuals(), allowed); why != "" {
		return nil, why
	}
	bottom.Larg = &pg.Node{Node: &pg.Node_JoinExpr{JoinExpr: &pg.JoinExpr{Jointype: j.GetJointype(), Larg: l, Rarg: first, Quals: j.GetQuals()}}}
	return r, ""
}

// aliasesOf are the names a FROM item's tables are referred to by.
func aliasesOf(n *pg.Node) []string {
	switch {
	case n.GetJoinExpr() != nil:
		return append(aliasesOf(n.GetJoinExpr().GetLarg()), aliasesOf(n.GetJoinExpr().GetRarg())...)
	case n.GetRangeVar() != nil:
		if a := n.GetRangeVar().GetAlias(); a != nil {
			return []string{a.GetAliasname()}
		}
		return []string{n.GetRangeVar().GetRelname()}
	case n.GetRangeSubselect() != nil:
		if a := n.GetRangeSubselect().GetAlias(); a != nil {
			return []string{a.GetAliasname()}
		}
	}
	return nil
}

// onReads says why the ON of a parenthesized join cannot move to its
// first table: a column left unqualified, or of a table inside it other
// than its first ("" when every column is qualified by an allowed name).
func onReads(quals *pg.Node, allowed []string) string {
	why := ""
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if why != "" {
			return
		}
		if c, ok := m.Interface().(*pg.ColumnRef); ok {
			f := c.GetFields()
			if len(f) < 2 || f[len(f)-2].GetString_() == nil {
				why = "the ON clause of a parenthesized join must qualify its columns"
				return
			}
			q := f[len(f)-2].GetString_().GetSval()
			found := false
			for _, a := range allowed {
				if a == q {
					found = true
				}
			}
			if !found {
				why = "the ON clause of a parenthesized join may compare the tables before it only with its first table (" + q + " is another)"
			}
			return
		}
		children(m, walk)
	}
	if quals != nil {
		walk(quals.ProtoReflect())
	}
	return why
}
