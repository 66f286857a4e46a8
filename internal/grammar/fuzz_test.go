package grammar

import (
	"errors"
	"testing"

	pg_query "github.com/wasilibs/go-pgquery"
)

var fuzzSeeds = []string{
	"TRANSFORM order_totals FROM orders SELECT price + tax AS total",
	"transform t from s select a as b;",
	`TRANSFORM "Order""Totals" FROM "Orders" AS "O" SELECT "O"."Price" AS "Total Price"`,
	"TRANSFORM reports.totals FROM shop.orders o SELECT o.id AS id WITHOUT SOURCE INDEX",
	"TRANSFORM t FROM a JOIN b ON a.id = b.a_id SELECT a.x AS x, b.y AS y",
	"TRANSFORM t FROM a LEFT OUTER JOIN s.b bb ON a.k1 = bb.k1 AND a.k2 = bb.k2 INNER JOIN c ON c.id = a.c SELECT a.x AS x",
	"TRANSFORM daily FROM sales SELECT date_trunc('day', created_at) AS day, count(*) AS n, sum(amount) FILTER (WHERE amount > 0) AS gross WHERE NOT refunded GROUP BY date_trunc('day', created_at)",
	"TRANSFORM t FROM s SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) AS m, a AS a GROUP BY a",
	"TRANSFORM t FROM s SELECT CAST(a AS int) AS b, x::timestamp without time zone AS ts, CASE WHEN a THEN 1 END AS c",
	"TRANSFORM t -- c\nFROM s /* c */ SELECT 'a;b' AS x; -- end",
	`TRANSFORM t FROM s SELECT U&"d!0061t" UESCAPE '!' AS x`,
	"PAUSE TRANSFORM t", "PAUSE TRANSFORM s.t.c", "RESUME TRANSFORM t.c", "DROP TRANSFORM s.t",
	"ALTER TRANSFORM t ADD COLUMN lower(x) AS y", "ALTER TRANSFORM t DROP COLUMN y", "alter transform t add a + 1 as b",
	"TRANSFORM t FROM s SELECT a; DROP TABLE x AS b",
	"TRANSFORM t FROM s SELECT (SELECT 1) AS b",
	"TRANSFORM t FROM s SELECT sum(x) OVER () AS b",
	"TRANSFORM t FROM s SELECT sum(x) AS b",
	"TRANSFORM t FROM s SELECT a AS a, b AS b, count(*) AS n GROUP BY a",
	"TRANSFORM t FROM a JOIN b ON a.x = b.x OR a.y < 1 SELECT a.x AS x",
	"TRANSFORM t FROM s SELECT 'ééé' || b c d AS x",
	"TRANSFORM t FROM s SELECT lower(a AS b",
	"TRANSFORM t FROM s SELECT * AS b WHERE c = $1",
	"WITH q AS (SELECT 1) TRANSFORM t FROM q SELECT a AS b",
	"TRANSFORM t FROM \"s\x00\" SELECT a\xff AS b",
	"",
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	// Compile the parser's WebAssembly module before the first input: each
	// fuzzing worker runs this, and the compile (slower still under the
	// fuzzer's coverage instrumentation) would otherwise count against the
	// first input's time limit and look like a hang.
	_, _ = Parse("PAUSE TRANSFORM t")
	f.Fuzz(func(t *testing.T, text string) {
		st, err := Parse(text)
		if err != nil {
			if st != nil {
				t.Fatalf("both a statement and an error for %q", text)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %T (%v) is not *Error for %q", err, err, text)
			}
			if pe.Kind != Syntax && pe.Kind != Invalid {
				t.Fatalf("unknown kind %q for %q", pe.Kind, text)
			}
			if pe.Line < 1 || pe.Column < 1 || pe.Token == "" || pe.Msg == "" {
				t.Fatalf("error without a position: %#v for %q", pe, text)
			}
			return
		}
		var exprs []string
		switch s := st.(type) {
		case *Transform:
			if s.Target.Name == "" || s.From.Table.Name == "" || len(s.Select) == 0 {
				t.Fatalf("incomplete transform %#v for %q", s, text)
			}
			for _, it := range s.Select {
				if it.Name == "" {
					t.Fatalf("empty output name for %q", text)
				}
				exprs = append(exprs, it.Expr)
			}
			exprs = append(exprs, s.GroupBy...)
			if s.Where != "" {
				exprs = append(exprs, s.Where)
			}
		case *Alter:
			if s.Action == AlterAddColumn {
				exprs = append(exprs, s.Column.Expr)
			}
		case *Pause, *Resume, *Drop:
		default:
			t.Fatalf("unexpected statement %T for %q", st, text)
		}
		for _, e := range exprs {
			tree, err := pg_query.Parse("SELECT " + e)
			if err != nil {
				t.Fatalf("canonical %q does not parse (from %q): %v", e, text, err)
			}
			stmts := tree.GetStmts()
			if len(stmts) != 1 || len(stmts[0].GetStmt().GetSelectStmt().GetTargetList()) != 1 {
				t.Fatalf("canonical %q is not one expression (from %q)", e, text)
			}
		}
	})
}
