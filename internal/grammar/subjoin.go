package grammar

import (
	"sort"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Semi- and anti-joins (decision 0026): a top-level AND part of WHERE that
// is [NOT] EXISTS (SELECT ... FROM u WHERE u.x = t.y [AND ...]) or
// t.y [NOT] IN (SELECT u.x FROM u [WHERE ...]) is taken out of the WHERE
// clause and described as a SubJoin; the planner writes it back, with the
// table qualified, once the tables are resolved.

// subJoins takes the semi- and anti-joins out of an analysed WHERE
// clause's top-level AND parts, leaving the other parts in rt (nil when
// none is left). outer are the qualifiers of the statement's tables.
func (p *stmtParser) subJoins(rt *pg.ResTarget, x *expr, end int) ([]SubJoin, *Error) {
	parts := andParts(rt.GetVal())
	var rest []*pg.Node
	var subs []SubJoin
	for _, n := range parts {
		anti := false
		sl := n.GetSubLink()
		if b := n.GetBoolExpr(); b != nil && b.GetBoolop() == pg.BoolExprType_NOT_EXPR && len(b.GetArgs()) == 1 {
			if sl = b.GetArgs()[0].GetSubLink(); sl != nil {
				anti = true
			}
		}
		if sl == nil {
			rest = append(rest, n)
			continue
		}
		typ := sl.GetSubLinkType()
		if typ != pg.SubLinkType_EXISTS_SUBLINK && typ != pg.SubLinkType_ANY_SUBLINK {
			rest = append(rest, n) // refused by the walker, as any subquery elsewhere
			continue
		}
		sj, e := p.subJoin(sl, anti, x, end)
		if e != nil {
			return nil, e
		}
		subs = append(subs, sj)
	}
	switch len(rest) {
	case 0:
		rt.Val = nil
	case 1:
		rt.Val = rest[0]
	default:
		rt.Val = &pg.Node{Node: &pg.Node_BoolExpr{BoolExpr: &pg.BoolExpr{Boolop: pg.BoolExprType_AND_EXPR, Args: rest}}}
	}
	return subs, nil
}

// subJoin reads one [NOT] EXISTS or [NOT] IN subquery.
func (p *stmtParser) subJoin(sl *pg.SubLink, anti bool, x *expr, end int) (SubJoin, *Error) {
	at := x.offset(int(sl.GetLocation()), end)
	refuse := func(msg string) (SubJoin, *Error) { return SubJoin{}, p.errAtByte(Invalid, at, msg, "") }
	sj := SubJoin{Anti: anti, In: sl.GetSubLinkType() == pg.SubLinkType_ANY_SUBLINK}
	what := "EXISTS"
	if sj.In {
		what = "IN"
		if ops := sl.GetOperName(); len(ops) > 1 || (len(ops) == 1 && ops[0].GetString_().GetSval() != "=") {
			return refuse("only IN (SELECT ...) and = ANY (SELECT ...) subqueries are supported")
		}
	}
	sel := sl.GetSubselect().GetSelectStmt()
	if sel == nil || sel.GetWithClause() != nil || sel.GetOp() != pg.SetOperation_SETOP_NONE || len(sel.GetDistinctClause()) > 0 ||
		len(sel.GetGroupClause()) > 0 || sel.GetHavingClause() != nil || len(sel.GetWindowClause()) > 0 || len(sel.GetSortClause()) > 0 ||
		sel.GetLimitCount() != nil || sel.GetLimitOffset() != nil || len(sel.GetValuesLists()) > 0 || len(sel.GetLockingClause()) > 0 {
		return refuse("the subquery of " + what + " must be a plain SELECT ... FROM one table [WHERE ...]: no WITH, DISTINCT, GROUP BY, HAVING, ORDER BY, LIMIT or set operations")
	}
	if len(sel.GetFromClause()) != 1 || sel.GetFromClause()[0].GetRangeVar() == nil {
		return refuse("the subquery of " + what + " must read exactly one table: join the others in the outer FROM, or write one subquery per table")
	}
	rv := sel.GetFromClause()[0].GetRangeVar()
	sj.Table = TableRef{Table: Name{Schema: rv.GetSchemaname(), Name: rv.GetRelname()}, Alias: rv.GetAlias().GetAliasname()}
	inner := qualifier(sj.Table)
	if p.subOuter[inner] {
		return refuse("the subquery's table needs an alias different from the outer tables' (" + inner + ")")
	}
	isInner := func(c ColumnRef) bool { return c.Qualifier == "" || c.Qualifier == inner }
	if sj.In {
		outerCol, ok := plainColumn(sl.GetTestexpr())
		targets := sel.GetTargetList()
		var innerCol ColumnRef
		var iok bool
		if len(targets) == 1 {
			innerCol, iok = plainColumn(targets[0].GetResTarget().GetVal())
		}
		if !ok || !iok || !isInner(innerCol) || outerCol.Qualifier == inner {
			return refuse("IN (SELECT ...) must compare a column of the outer tables with one column of the subquery's table: t.y IN (SELECT u.x FROM u ...)")
		}
		sj.On = append(sj.On, JoinCond{Left: innerCol, Right: outerCol})
	}
	var conds []*pg.Node
	visit := func(n *pg.Node) {
		if a := n.GetAExpr(); a != nil && a.GetKind() == pg.A_Expr_Kind_AEXPR_OP && len(a.GetName()) == 1 && a.GetName()[0].GetString_().GetSval() == "=" {
			l, lok := plainColumn(a.GetLexpr())
			r, rok := plainColumn(a.GetRexpr())
			if lok && rok && isInner(l) != isInner(r) {
				if !isInner(l) {
					l, r = r, l
				}
				sj.On = append(sj.On, JoinCond{Left: l, Right: r})
				return
			}
		}
		conds = append(conds, n)
	}
	if w := sel.GetWhereClause(); w != nil {
		for _, n := range andParts(w) {
			visit(n)
		}
	}
	if len(sj.On) == 0 {
		return refuse(what + " (SELECT ...) needs an equality between a column of " + inner + " and a qualified column of the outer tables (an uncorrelated subquery is not supported)")
	}
	if len(conds) > 0 {
		var cond *pg.Node
		if len(conds) == 1 {
			cond = conds[0]
		} else {
			cond = &pg.Node{Node: &pg.Node_BoolExpr{BoolExpr: &pg.BoolExpr{Boolop: pg.BoolExprType_AND_EXPR, Args: conds}}}
		}
		w := newWalker("aggregates are not allowed in a subquery's WHERE")
		w.walk(cond.ProtoReflect(), int(sl.GetLocation()), false)
		if w.errMsg != "" {
			return SubJoin{}, p.errAtByte(Invalid, x.offset(w.errLoc, end), w.errMsg, "")
		}
		sort.SliceStable(w.cols, func(i, j int) bool { return w.cols[i].loc < w.cols[j].loc })
		for _, c := range w.cols {
			if !isInner(c.val) {
				return refuse("the subquery's conditions other than equalities with an outer column may read only " + inner + "'s columns (" + c.val.String() + " is not)")
			}
			sj.WhereColumns = appendUnique(sj.WhereColumns, c.val)
		}
		for _, f := range w.funcs {
			sj.funcs = append(sj.funcs, located[string]{x.offset(f.loc, end), f.val})
		}
		tree := &pg.ParseResult{Stmts: []*pg.RawStmt{{Stmt: &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: &pg.SelectStmt{
			TargetList:  []*pg.Node{{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: cond}}}},
			LimitOption: pg.LimitOption_LIMIT_OPTION_DEFAULT, Op: pg.SetOperation_SETOP_NONE,
		}}}}}}
		sql, err := pgDeparse(tree)
		if err != nil || !strings.HasPrefix(sql, selectPrefix) {
			return refuse("PostgreSQL cannot print the subquery's WHERE back as SQL; write it differently")
		}
		sj.Where = strings.TrimPrefix(sql, selectPrefix)
	}
	return sj, nil
}
