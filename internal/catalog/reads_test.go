package catalog_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

func TestMissingReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, db := testsupport.Pool(t)
	exec := func(sql string) {
		t.Helper()
		_, err := db.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(`CREATE TABLE o (id int PRIMARY KEY, cust int, price int, qty int, note text)`)
	exec(`CREATE TABLE "Cu" (id int, region text, qty int, CONSTRAINT cu_pk PRIMARY KEY (id))`)
	cat := catalog.New("trellis")
	from := plan.Source{Schema: "public", Table: "o", KeyCols: []string{"id"}, KeyTypes: []string{"integer"}}
	proj := &catalog.Transform{Spec: plan.Spec{Source: from, Reads: []string{"price", "qty", "note"},
		Columns: []plan.Column{{Name: "pq", Expr: "price * qty"}, {Name: "note", Expr: "note"}}}}
	joined := plan.Source{Schema: "public", Table: "Cu", KeyCols: []string{"id"}, KeyTypes: []string{"integer"},
		Needs: []string{"id"}, Reads: []string{"region", "id"}}
	join := &catalog.Transform{Spec: plan.Spec{
		Source: plan.Source{Schema: "public", Table: "o", KeyCols: []string{"id"}, KeyTypes: []string{"integer"}, Needs: []string{"cust"}},
		Join:   &plan.Join{Source: joined, On: []plan.JoinOn{{From: "cust", Joined: "id"}}},
		// qty is read on the joined side (recorded with the FROM side's
		// reads, as ALTER TRANSFORM ... ADD COLUMN does).
		Reads:   []string{"cust", "price", "qty"},
		Columns: []plan.Column{{Name: "region", Expr: "c.region"}, {Name: "price", Expr: "o.price"}, {Name: "qty", Expr: "c.qty"}},
	}}

	check := func(tr *catalog.Transform, table string, cols ...string) {
		t.Helper()
		gotTable, gotCols, err := cat.MissingReads(ctx, db, tr)
		require.NoError(t, err)
		require.Equal(t, table, gotTable)
		if len(cols) == 0 {
			require.Empty(t, gotCols)
		} else {
			require.Equal(t, cols, gotCols)
		}
	}
	check(proj, "")
	check(join, "")

	exec(`ALTER TABLE o DROP COLUMN qty, DROP COLUMN note`)
	check(proj, "public.o", "note", "qty")
	check(join, "") // qty may be the joined table's, which has it

	exec(`ALTER TABLE "Cu" DROP COLUMN region`)
	check(join, "public.Cu", "region")
	exec(`ALTER TABLE "Cu" ADD COLUMN region text`)
	check(join, "")

	// The FROM side's ON column is its own, whatever the joined side has.
	exec(`ALTER TABLE "Cu" ADD COLUMN cust int`)
	exec(`ALTER TABLE o DROP COLUMN cust`)
	check(join, "public.o", "cust")
	exec(`ALTER TABLE o ADD COLUMN cust int`)

	// A lost primary key reports the key columns.
	exec(`ALTER TABLE "Cu" DROP CONSTRAINT cu_pk`)
	check(join, "public.Cu", "id")
	exec(`ALTER TABLE "Cu" ADD PRIMARY KEY (id, region)`)
	check(join, "public.Cu", "id")
	exec(`ALTER TABLE "Cu" DROP CONSTRAINT "Cu_pkey"`)
	exec(`ALTER TABLE "Cu" ADD PRIMARY KEY (id)`)
	check(join, "")

	// A read of an expression ALTER TRANSFORM dropped is recorded still,
	// but nothing mentions it.
	stale := &catalog.Transform{Spec: plan.Spec{Source: from, Reads: []string{"price", "qty"},
		Columns: []plan.Column{{Name: "p", Expr: `"price" * 2`}}}}
	check(stale, "")
	stale.Spec.Columns = append(stale.Spec.Columns, plan.Column{Name: "q", Expr: "coalesce(QTY, 0)"})
	check(stale, "public.o", "qty")
	p, err := cat.CheckReads(ctx, db, stale)
	require.NoError(t, err)
	require.Equal(t, []string{"q"}, p.Outputs)
	stale.Spec.Where = "qty > 0"
	p, err = cat.CheckReads(ctx, db, stale)
	require.NoError(t, err)
	require.Nil(t, p.Outputs) // the WHERE reads it too
	stale.Spec.Where = ""
	stale.Spec.Window = &plan.Window{Rank: "row_number() OVER (ORDER BY qty DESC, id)", Limit: 3}
	p, err = cat.CheckReads(ctx, db, stale)
	require.NoError(t, err)
	require.Nil(t, p.Outputs) // a top-k's rank reads it too
	stale.Spec.Window = &plan.Window{Partition: []string{"qty"}}
	p, err = cat.CheckReads(ctx, db, stale)
	require.NoError(t, err)
	require.Nil(t, p.Outputs) // and a window's PARTITION BY

	// A table that is gone is not this check's business.
	exec(`DROP TABLE o`)
	check(proj, "")
	check(join, "")
}

func TestMentions(t *testing.T) {
	for _, c := range []struct {
		expr, col string
		want      bool
	}{
		{"price + tax", "tax", true},
		{"PRICE + 1", "price", true},
		{`"Price" + 1`, "Price", true},
		{`"Price" + 1`, "price", false},
		{`"a""b" || x`, `a"b`, true},
		{"o.qty * 2", "qty", true},
		{"o.qty * 2", "o", true},
		{"price_x + 1", "price", false},
		{"'price' || x", "price", false},
		{"'it''s price' || x", "x", true},
		{"'it''s price' || x", "price", false},
		{`E'it\'s price' || x`, "price", false},
		{`E'it\'s price' || x`, "x", true},
		{"1e5 + e", "e", true},
		{"1e5 + 2", "e", false},
		{"", "x", false},
	} {
		require.Equal(t, c.want, catalog.Mentions(c.expr, c.col), "%s / %s", c.expr, c.col)
	}
}
