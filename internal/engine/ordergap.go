package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/plan"
)

// orderSuffix is the ORDER BY (or index column) options that give d.
func orderSuffix(d orderDir) string {
	s := ""
	if d.desc {
		s = " DESC"
	}
	if d.nullsFirst != d.desc {
		if d.nullsFirst {
			s += " NULLS FIRST"
		} else {
			s += " NULLS LAST"
		}
	}
	return s
}

// orderFixText writes the CREATE INDEX of a global top-k's ORDER BY, as
// the definition writes it (IndexGaps replaces it with PostgreSQL's).
func orderFixText(schema, name string, spec plan.Spec) string {
	exprs, dirs, _ := topKOrder(spec)
	parts := make([]string, len(exprs))
	for i, x := range exprs {
		c := exprColumns([]string{x})[0]
		if plainColumn.MatchString(c) && !strings.ContainsAny(c, "( ") {
			c = ident.Quote(c)
		} else {
			c = "(" + c + ")"
		}
		parts[i] = c + orderSuffix(dirs[i])
	}
	return fmt.Sprintf("CREATE INDEX ON %s (%s);", ident.Qualified(schema, name), strings.Join(parts, ", "))
}

// orderGap says whether table lacks a btree index that gives a global
// top-k's rows in its ORDER BY: one leading with need's expressions in
// that order, each column with the item's direction or every column
// reversed (a backward scan). It also returns the CREATE INDEX that
// PostgreSQL accepts for it ("" when it could not be checked).
func (e *Engine) orderGap(ctx context.Context, q catalog.Querier, schema, name string, need neededIndex) (bool, string, error) {
	suffixes := make([]string, len(need.order))
	for i, d := range need.order {
		suffixes[i] = orderSuffix(d)
	}
	fix, _, probed := e.indexFixOrdered(ctx, plan.Source{Schema: schema, Table: name}, need.alias, need.exprs, suffixes, "")
	want := probed
	if len(want) != len(need.exprs) {
		want = exprColumns(need.exprs)
	}
	for i := range want {
		want[i] = normalizeExpr(want[i])
	}
	rows, err := q.Query(ctx, sqlIndexOrders, ident.Qualified(schema, name), len(need.exprs))
	if err != nil {
		return false, "", err
	}
	type index struct {
		defs []string
		opts []int16
	}
	indexes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var x index
		err := r.Scan(&x.defs, &x.opts)
		return x, err
	})
	if err != nil {
		return false, "", err
	}
	for _, x := range indexes {
		if len(x.defs) != len(want) || len(x.opts) != len(want) {
			continue
		}
		forward, backward := true, true
		for i, d := range x.defs {
			if normalizeExpr(d) != want[i] {
				forward, backward = false, false
				break
			}
			desc, nullsFirst := x.opts[i]&1 != 0, x.opts[i]&2 != 0
			forward = forward && desc == need.order[i].desc && nullsFirst == need.order[i].nullsFirst
			backward = backward && desc != need.order[i].desc && nullsFirst != need.order[i].nullsFirst
		}
		if forward || backward {
			return false, "", nil
		}
	}
	return true, fix, nil
}
