package plan

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/errs"
	"github.com/trellis-pg/trellis/internal/grammar"
	"github.com/trellis-pg/trellis/trellistype"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the SQL generated now")

// table describes a source table as the catalog would: "name type"
// columns, the key's columns named.
func table(schema, name, alias string, key []string, cols ...string) *Table {
	t := &Table{Schema: schema, Name: name, Alias: alias, Columns: map[string]string{}}
	if t.Alias == "" {
		t.Alias = name
	}
	for _, c := range cols {
		n, typ, _ := strings.Cut(c, " ")
		t.Columns[n] = typ
		t.Order = append(t.Order, n)
	}
	for _, k := range key {
		t.KeyCols, t.KeyTypes = append(t.KeyCols, k), append(t.KeyTypes, t.Columns[k])
	}
	return t
}

var (
	orders    = []string{"id bigint", "customer_id bigint", "price numeric", "tax numeric", "status text", "region text", "placed_at timestamptz"}
	customers = []string{"id bigint", "name text", "tier integer"}
	cust3     = []string{"id bigint", "name text", "region_id integer"}
	regions   = []string{"id integer", "name text"}
	items     = []string{"order_id bigint", "line integer", "product_id bigint", "qty integer"}
	products  = []string{"id bigint", "title text", "price numeric"}
)

// goldenCase is a statement over catalog facts; the types are those
// PostgreSQL infers for the target's columns (recorded by the engine
// after it creates the target).
type goldenCase struct {
	name   string
	stmt   string
	tables []*Table
	types  map[string]string
	// alter, when set, are ALTER TRANSFORM statements applied in order.
	alter []string
	// paused are columns paused after the definition.
	paused []string
	// ops are the operators of the types that have their own (SetOps).
	ops map[string]*Op
	// partTypes, when set, keep the global aggregate through partials
	// (PartialsFor), its parts of these types (decision 0051).
	partTypes []string
}

// citextOps are citext's operators, installed in public.
var citextOps = map[string]*Op{"public.citext": {Schema: "public", Type: "public.citext"}}

var goldenCases = []goldenCase{
	{
		name: "union_all",
		stmt: "TRANSFORM moves FROM orders o SELECT o.id, o.price WHERE o.status = 'paid' UNION ALL SELECT id, -tier FROM customers UNION ALL SELECT order_id, qty FROM items i",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...), table("public", "customers", "", []string{"id"}, customers...),
			table("public", "items", "i", []string{"order_id", "line"}, items...)},
		types: map[string]string{"branch": "smallint", "id": "bigint", "price": "numeric", "i_order_id": "bigint", "i_line": "integer"},
	},
	{
		name: "union_intersect_except",
		stmt: "TRANSFORM shared FROM orders SELECT region, customer_id WHERE price > 0 UNION SELECT name, id FROM customers INTERSECT SELECT title, id FROM products EXCEPT SELECT name, id FROM regions",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...), table("public", "customers", "", []string{"id"}, customers...),
			table("public", "products", "", []string{"id"}, products...), table("public", "regions", "", []string{"id"}, regions...)},
		types: map[string]string{"region": "text", "customer_id": "bigint"},
	},
	{
		name: "intersect_one_table",
		stmt: "TRANSFORM paid FROM orders SELECT id, price WHERE price > 0 INTERSECT SELECT id, price FROM orders WHERE status = 'paid' EXCEPT SELECT id, price FROM orders WHERE region = 'none'",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...), table("public", "orders", "", []string{"id"}, orders...),
			table("public", "orders", "", []string{"id"}, orders...)},
		types: map[string]string{"id": "bigint", "price": "numeric"},
	},
	{
		name: "union_all_joined_branches",
		stmt: "TRANSFORM lines FROM orders o JOIN customers c ON c.id = o.customer_id SELECT o.id, c.name UNION ALL SELECT i.order_id, p.title FROM items i LEFT JOIN products p ON p.id = i.product_id WHERE EXISTS (SELECT 1 FROM regions r WHERE r.id = i.line)",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...), table("public", "customers", "c", []string{"id"}, customers...),
			table("public", "items", "i", []string{"order_id", "line"}, items...), table("public", "products", "p", []string{"id"}, products...),
			table("public", "regions", "r", []string{"id"}, regions...)},
		types: map[string]string{"branch": "smallint", "id": "bigint", "name": "text", "i_line": "integer", "c_id": "bigint", "p_id": "bigint"},
	},
	{
		name:   "union_all_aggregated",
		stmt:   "TRANSFORM net WITH u AS (SELECT o.customer_id AS cid, o.price FROM orders o WHERE o.status = 'paid' UNION ALL SELECT id, -tier FROM customers) FROM u SELECT cid, sum(price) AS total, count(*) AS n WHERE price <> 0 GROUP BY cid HAVING count(*) > 1",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...), table("public", "customers", "", []string{"id"}, customers...)},
		types:  map[string]string{"cid": "bigint", "total": "numeric", "n": "bigint"},
	},
	{
		name: "union_all_aggregated_joined",
		stmt: "TRANSFORM by_name FROM (SELECT c.name, o.price FROM orders o JOIN customers c ON c.id = o.customer_id UNION ALL SELECT title, price FROM products) s SELECT lower(name) AS lname, max(price) AS top GROUP BY lower(name)",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...), table("public", "customers", "c", []string{"id"}, customers...),
			table("public", "products", "", []string{"id"}, products...)},
		types: map[string]string{"lname": "text", "top": "numeric"},
	},
	{
		name:   "union_all_grouped_branches",
		stmt:   "TRANSFORM per_branch FROM orders SELECT customer_id, count(*) AS n, sum(price) AS total WHERE status = 'paid' GROUP BY customer_id UNION ALL SELECT id, count(*), sum(-tier) FROM customers GROUP BY id HAVING count(*) > 1",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...), table("public", "customers", "", []string{"id"}, customers...)},
		types:  map[string]string{"branch": "smallint", "customer_id": "bigint", "n": "bigint", "total": "numeric"},
	},
	{
		name:   "union_all_aggregated_global",
		stmt:   "TRANSFORM total FROM (SELECT price FROM orders UNION ALL SELECT price FROM products) s SELECT sum(price) AS total",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...), table("public", "products", "", []string{"id"}, products...)},
		types:  map[string]string{"total": "numeric"},
	},
	{
		name: "intersect_all",
		stmt: "TRANSFORM common FROM orders SELECT region, customer_id WHERE price > 0 INTERSECT ALL SELECT name, id FROM customers EXCEPT ALL SELECT title, id FROM products",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...), table("public", "customers", "", []string{"id"}, customers...),
			table("public", "products", "", []string{"id"}, products...)},
		types: map[string]string{"region": "text", "customer_id": "bigint", "ordinal": "bigint"},
	},
	{
		name: "union_over_except_all",
		stmt: "TRANSFORM leftover FROM orders SELECT region EXCEPT ALL SELECT name FROM customers UNION SELECT title FROM products",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...), table("public", "customers", "", []string{"id"}, customers...),
			table("public", "products", "", []string{"id"}, products...)},
		types: map[string]string{"region": "text"},
	},
	{
		name:   "union_aggregated",
		stmt:   "TRANSFORM net WITH u AS (SELECT o.customer_id AS cid, o.price FROM orders o UNION SELECT id, tier FROM customers EXCEPT ALL SELECT id, price FROM products) FROM u SELECT cid, sum(price) AS total GROUP BY cid",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...), table("public", "customers", "", []string{"id"}, customers...), table("public", "products", "", []string{"id"}, products...)},
		types:  map[string]string{"cid": "bigint", "total": "numeric"},
	},
	{
		name: "union_joined_branch",
		stmt: "TRANSFORM names FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT c.name WHERE o.price > 0 EXCEPT SELECT title FROM products",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...), table("public", "customers", "c", []string{"id"}, customers...),
			table("public", "products", "", []string{"id"}, products...)},
		types: map[string]string{"name": "text"},
	},
	{
		name:   "projection",
		stmt:   "TRANSFORM order_totals FROM orders SELECT price + tax AS total WHERE status <> 'cancelled'",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"total": "numeric"},
	},
	{
		name: "projection_composite_key",
		stmt: `TRANSFORM reports."Lines" FROM app.order_lines AS l SELECT l.order_id AS order_id, upper(l.sku) AS "SKU", l.qty * l.price AS amount`,
		tables: []*Table{table("app", "order_lines", "l", []string{"order_id", "line"},
			"order_id bigint", "line integer", "sku text", "qty integer", "price numeric")},
		types: map[string]string{"SKU": "text", "amount": "numeric"},
	},
	{
		name:   "projection_paused_column",
		stmt:   "TRANSFORM order_totals FROM orders SELECT price + tax AS total, price / tax AS ratio",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"total": "numeric", "ratio": "numeric"},
		paused: []string{"ratio"},
	},
	{
		name: "join",
		stmt: "TRANSFORM order_lines FROM orders o JOIN customers c ON o.customer_id = c.id SELECT o.id AS order_id, c.name AS customer, o.price AS price",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...)},
		types: map[string]string{"order_id": "bigint", "c_id": "bigint", "customer": "text", "price": "numeric"},
	},
	{
		name:   "aggregate",
		stmt:   "TRANSFORM customer_totals FROM orders SELECT customer_id AS customer_id, sum(price) AS revenue, count(*) AS n WHERE status <> 'cancelled' GROUP BY customer_id",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"customer_id": "bigint", "revenue": "numeric", "n": "bigint"},
	},
	{
		name:   "aggregate_two_keys",
		stmt:   "TRANSFORM daily FROM orders SELECT region AS region, date_trunc('day', placed_at) AS day, avg(price) AS mean GROUP BY region, date_trunc('day', placed_at)",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"region": "text", "day": "timestamp with time zone", "mean": "numeric"},
		alter:  []string{"ALTER TRANSFORM daily ADD COLUMN max(tax) AS top_tax"},
	},
	{
		name: "left_join_grouped_by_joined",
		stmt: "TRANSFORM oj FROM r LEFT JOIN s ON r.i = s.i SELECT s.j AS sj, count(*) AS n GROUP BY s.j",
		tables: []*Table{table("public", "r", "", []string{"id"}, "id integer", "i integer"),
			table("public", "s", "", []string{"id"}, "id integer", "i integer", "j text")},
		types: map[string]string{"sj": "text", "n": "bigint"},
	},
	{
		name:   "projection_star",
		stmt:   "TRANSFORM copy FROM orders SELECT *, price + tax AS total",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types: map[string]string{"customer_id": "bigint", "price": "numeric", "tax": "numeric", "status": "text", "region": "text",
			"placed_at": "timestamp with time zone", "total": "numeric"},
	},
	{
		name: "join_comma",
		stmt: "TRANSFORM order_lines FROM orders o, customers c SELECT o.id, c.name, o.price WHERE o.customer_id = c.id AND c.tier > 1",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...)},
		types: map[string]string{"id": "bigint", "c_id": "bigint", "name": "text", "price": "numeric"},
	},
	{
		name: "join_using_star",
		stmt: "TRANSFORM noted FROM orders o LEFT JOIN notes n USING (id) SELECT *",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, "id bigint", "price numeric"),
			table("public", "notes", "n", []string{"id", "line"}, "id bigint", "line integer", "note text")},
		types: map[string]string{"id": "bigint", "price": "numeric", "line": "integer", "note": "text"},
	},
	{
		name: "join_full",
		stmt: "TRANSFORM reach FROM orders o FULL JOIN customers c ON c.id = o.customer_id SELECT o.id, c.name, o.price",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...)},
		types: map[string]string{"id": "bigint", "c_id": "bigint", "name": "text", "price": "numeric"},
	},
	{
		name: "join_right",
		stmt: "TRANSFORM reach FROM orders o RIGHT JOIN customers c ON c.id = o.customer_id SELECT o.id AS order_id, c.name, o.price",
		tables: []*Table{table("public", "customers", "c", []string{"id"}, customers...),
			table("public", "orders", "o", []string{"id"}, orders...)},
		types: map[string]string{"c_id": "bigint", "order_id": "bigint", "name": "text", "price": "numeric"},
	},
	{
		name: "join_right_third",
		stmt: "TRANSFORM reach FROM orders o JOIN customers c ON c.id = o.customer_id RIGHT JOIN regions r ON r.id = c.tier SELECT o.price, c.name, r.name AS region",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...), table("public", "regions", "r", []string{"id"}, regions...)},
		types: map[string]string{"o_id": "bigint", "c_id": "bigint", "r_id": "integer", "name": "text", "price": "numeric", "region": "text"},
	},
	{
		name: "join_full_third",
		stmt: "TRANSFORM reach FROM orders o LEFT JOIN customers c ON c.id = o.customer_id FULL JOIN regions r ON r.id = c.tier SELECT o.price, r.name",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...), table("public", "regions", "r", []string{"id"}, regions...)},
		types: map[string]string{"o_id": "bigint", "c_id": "bigint", "r_id": "integer", "name": "text", "price": "numeric"},
	},
	{
		name: "join_full_third_grouped",
		stmt: "TRANSFORM reach FROM orders o LEFT JOIN customers c ON c.id = o.customer_id FULL JOIN regions r ON r.id = c.tier SELECT r.name, count(o.id) AS n, sum(o.price) AS total GROUP BY r.name",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...), table("public", "regions", "r", []string{"id"}, regions...)},
		types: map[string]string{"name": "text", "n": "bigint", "total": "numeric"},
	},
	{
		name:   "distinct",
		stmt:   "TRANSFORM pairs FROM orders SELECT DISTINCT region, lower(status), 'x' AS tag",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"region": "text", "lower": "text", "tag": "text"},
	},
	{
		name:   "aggregate_having",
		stmt:   "TRANSFORM big_customers FROM orders SELECT customer_id, sum(price) AS revenue GROUP BY customer_id HAVING count(*) > 2",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"customer_id": "bigint", "revenue": "numeric"},
	},
	{
		name:   "aggregate_global",
		stmt:   "TRANSFORM totals FROM orders SELECT count(*), sum(price) AS revenue, max(placed_at) AS latest WHERE status <> 'cancelled'",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"count": "bigint", "revenue": "numeric", "latest": "timestamp with time zone"},
		alter:  []string{"ALTER TRANSFORM totals ADD COLUMN avg(tax) AS mean_tax"},
	},
	{
		name:      "aggregate_global_partials",
		stmt:      "TRANSFORM totals FROM orders SELECT count(*) AS n, sum(price) AS revenue, avg(tax) AS mean_tax, coalesce(max(placed_at), min(placed_at)) AS latest WHERE status <> 'cancelled' HAVING count(*) > 2",
		tables:    []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:     map[string]string{"n": "bigint", "revenue": "numeric", "mean_tax": "numeric", "latest": "timestamp with time zone"},
		paused:    []string{"mean_tax"},
		partTypes: []string{"bigint", "numeric", "numeric", "bigint", "timestamp with time zone", "timestamp with time zone"},
	},
	{
		name: "aggregate_global_join_having",
		stmt: "TRANSFORM tiered FROM orders o JOIN customers c ON c.id = o.customer_id SELECT count(*) AS n, sum(o.price * c.tier) AS weighted HAVING count(*) > 0",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...)},
		types: map[string]string{"n": "bigint", "weighted": "numeric"},
	},
	{
		name:   "projection_numeric_key_json",
		stmt:   "TRANSFORM docs_t FROM docs SELECT body AS body, lower(title) AS title",
		tables: []*Table{table("public", "docs", "", []string{"code"}, "code numeric", "body json", "title text")},
		types:  map[string]string{"body": "json", "title": "text"},
	},
	{
		name:   "aggregate_array_key",
		stmt:   "TRANSFORM by_tags FROM docs SELECT tags AS tags, count(*) AS n, json_agg(body) AS bodies GROUP BY tags",
		tables: []*Table{table("public", "docs", "", []string{"id"}, "id bigint", "tags integer[]", "body json")},
		types:  map[string]string{"tags": "integer[]", "n": "bigint", "bodies": "json"},
	},
	{
		name:   "window",
		stmt:   "TRANSFORM ranked FROM orders SELECT region, price, sum(price) OVER (PARTITION BY region) AS region_total, rank() OVER (PARTITION BY region ORDER BY price DESC) AS r WHERE status <> 'cancelled'",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"region": "text", "id": "bigint", "price": "numeric", "region_total": "numeric", "r": "bigint"},
	},
	{
		name:   "window_whole_source",
		stmt:   "TRANSFORM running FROM orders SELECT id, sum(price) OVER (ORDER BY placed_at, id) AS running, row_number() OVER (ORDER BY price, id) AS n",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"id": "bigint", "running": "numeric", "n": "bigint"},
	},
	{
		name:   "distinct_on",
		stmt:   "TRANSFORM latest FROM orders SELECT DISTINCT ON (customer_id) customer_id, placed_at, price AS last_price ORDER BY customer_id, placed_at DESC, id",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"customer_id": "bigint", "placed_at": "timestamp with time zone", "last_price": "numeric"},
	},
	{
		name:   "top_k_per_group",
		stmt:   "TRANSFORM top3 FROM (SELECT id, region, price, row_number() OVER (PARTITION BY region ORDER BY price DESC, id) AS rn FROM orders WHERE status <> 'cancelled') s SELECT * WHERE rn <= 3",
		tables: []*Table{table("public", "orders", "s", []string{"id"}, orders...)},
		types:  map[string]string{"region": "text", "id": "bigint", "price": "numeric", "rn": "bigint"},
	},
	{
		name:   "top_k",
		stmt:   "TRANSFORM priciest FROM orders SELECT id, price * 2 AS doubled, status WHERE status <> 'cancelled' ORDER BY doubled DESC NULLS LAST, id LIMIT 10",
		tables: []*Table{table("public", "orders", "", []string{"id"}, orders...)},
		types:  map[string]string{"id": "bigint", "doubled": "numeric", "status": "text"},
	},
	{
		name: "join_altered",
		stmt: "TRANSFORM order_lines FROM orders o JOIN customers c ON o.customer_id = c.id SELECT o.id AS order_id, c.name AS customer",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...)},
		types: map[string]string{"order_id": "bigint", "c_id": "bigint", "customer": "text", "tier": "integer", "total": "numeric"},
		alter: []string{"ALTER TRANSFORM order_lines ADD COLUMN c.tier AS tier",
			"ALTER TRANSFORM order_lines ADD COLUMN o.price + o.tax AS total",
			"ALTER TRANSFORM order_lines DROP COLUMN customer"},
	},
	{
		name: "semi_exists",
		stmt: "TRANSFORM buyers FROM customers c SELECT c.name WHERE c.tier > 0 AND EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'paid')",
		tables: []*Table{table("public", "customers", "c", []string{"id"}, customers...),
			table("public", "orders", "o", []string{"id"}, orders...)},
		types: map[string]string{"name": "text"},
	},
	{
		name: "anti_not_in_grouped_join",
		stmt: "TRANSFORM quiet FROM orders o JOIN customers c ON c.id = o.customer_id SELECT c.tier, count(*) AS n WHERE o.id NOT IN (SELECT l.order_id FROM app.order_lines l) GROUP BY c.tier",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...),
			table("app", "order_lines", "l", []string{"order_id", "line"}, "order_id bigint", "line integer", "sku text")},
		types: map[string]string{"tier": "integer", "n": "bigint"},
	},
	{
		name: "join3_star",
		stmt: "TRANSFORM placed FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.name = o.region SELECT o.id, c.name AS customer, r.id AS region_id, o.price",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...),
			table("public", "regions", "r", []string{"id"}, regions...)},
		types: map[string]string{"id": "bigint", "c_id": "bigint", "region_id": "integer", "customer": "text", "price": "numeric", "title": "text"},
		alter: []string{"ALTER TRANSFORM placed ADD COLUMN r.name AS title"},
	},
	{
		name: "join3_chain_grouped",
		stmt: "TRANSFORM sold FROM order_items i JOIN orders o ON o.id = i.order_id LEFT JOIN products p ON p.id = i.product_id JOIN customers c ON c.id = o.customer_id SELECT p.title, sum(i.qty * p.price) AS revenue, count(*) AS n GROUP BY p.title",
		tables: []*Table{table("public", "order_items", "i", []string{"order_id", "line"}, items...),
			table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "products", "p", []string{"id"}, products...),
			table("public", "customers", "c", []string{"id"}, customers...)},
		types: map[string]string{"title": "text", "revenue": "numeric", "n": "bigint"},
	},
	{
		name: "join3_comma_grouped_by_middle",
		stmt: "TRANSFORM by_region FROM orders o, customers c, regions r SELECT r.name AS region, sum(o.price) AS revenue WHERE c.id = o.customer_id AND r.id = c.region_id AND o.status = 'paid' GROUP BY r.name",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, cust3...),
			table("public", "regions", "r", []string{"id"}, regions...)},
		types: map[string]string{"region": "text", "revenue": "numeric"},
	},
	// Derived tables and CTEs are inlined by the parser (decision 0028):
	// these compile to the projection, aggregate and join they stand for.
	{
		name:   "derived_projection",
		stmt:   "TRANSFORM paid FROM (SELECT id, price + tax AS total, status FROM orders WHERE status <> 'cancelled') p SELECT p.id, p.total * 2 AS doubled WHERE p.total > 10",
		tables: []*Table{table("public", "orders", "p", []string{"id"}, orders...)},
		types:  map[string]string{"doubled": "numeric"},
	},
	{
		name:   "derived_aggregate",
		stmt:   "TRANSFORM regions FROM (SELECT region, sum(price) AS revenue, count(*) AS n FROM orders GROUP BY region) r SELECT region, revenue / n AS mean WHERE n > 2",
		tables: []*Table{table("public", "orders", "r", []string{"id"}, orders...)},
		types:  map[string]string{"region": "text", "mean": "numeric"},
	},
	{
		name: "cte_join",
		stmt: "TRANSFORM lines WITH open AS (SELECT id, customer_id, price FROM orders WHERE status = 'open') FROM open o JOIN (SELECT id, name FROM customers WHERE tier > 1) c ON c.id = o.customer_id SELECT o.id, c.name, o.price",
		tables: []*Table{table("public", "orders", "o", []string{"id"}, orders...),
			table("public", "customers", "c", []string{"id"}, customers...)},
		types: map[string]string{"id": "bigint", "c_id": "bigint", "name": "text", "price": "numeric"},
	},
	{
		name:   "citext_projection_composite_key",
		stmt:   "TRANSFORM people_copy FROM people SELECT n",
		tables: []*Table{table("public", "people", "", []string{"name", "line"}, "name public.citext", "line integer", "n integer")},
		types:  map[string]string{"n": "integer"},
		ops:    citextOps,
	},
	{
		name:   "citext_projection_key",
		stmt:   "TRANSFORM people_copy FROM people SELECT n",
		tables: []*Table{table("public", "people", "", []string{"name"}, "name public.citext", "n integer")},
		types:  map[string]string{"n": "integer"},
		ops:    citextOps,
	},
	{
		name: "citext_join_grouped",
		stmt: "TRANSFORM by_team FROM people p JOIN teams t ON p.team = t.name SELECT t.name AS team, t.label AS label, sum(p.n) AS total GROUP BY t.name, t.label",
		tables: []*Table{table("public", "people", "p", []string{"id"}, "id bigint", "team public.citext", "line integer", "n integer"),
			table("public", "teams", "t", []string{"id"}, "id integer", "name public.citext", "label text")},
		types: map[string]string{"team": "public.citext", "label": "text", "total": "bigint"},
		ops:   citextOps,
	},
	{
		name: "citext_join",
		stmt: "TRANSFORM people_teams FROM people p JOIN teams t ON p.team = t.name SELECT p.n, t.label",
		tables: []*Table{table("public", "people", "p", []string{"name"}, "name public.citext", "team public.citext", "n integer"),
			table("public", "teams", "t", []string{"id"}, "id integer", "name public.citext", "label text")},
		types: map[string]string{"p_name": "public.citext", "t_id": "integer", "n": "integer", "label": "text"},
		ops:   citextOps,
	},
	{
		name: "citext_semi_in",
		stmt: "TRANSFORM red FROM people p SELECT p.n WHERE p.team IN (SELECT t.name FROM teams t WHERE t.label <> '')",
		tables: []*Table{table("public", "people", "p", []string{"id"}, "id bigint", "team public.citext", "n integer"),
			table("public", "teams", "t", []string{"id"}, "id integer", "name public.citext", "label text")},
		types: map[string]string{"n": "integer"},
		ops:   citextOps,
	},
}

// render compiles a case and prints the spec and every statement its plan
// generates, section by section.
func render(t *testing.T, c goldenCase) string {
	t.Helper()
	pl, needs := planOf(t, c)
	spec := pl.Spec
	var b strings.Builder
	section := func(name string, sql ...string) {
		fmt.Fprintf(&b, "-- %s\n", name)
		for _, s := range sql {
			b.WriteString(s)
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	section("statement", append([]string{c.stmt}, c.alter...)...)
	js, err := json.MarshalIndent(spec, "", "  ")
	require.NoError(t, err)
	section("spec", string(js))
	nj, err := json.Marshal(needs)
	require.NoError(t, err)
	section("captured old values (per table)", string(nj))
	section("KeyNames", strings.Join(pl.KeyNames(), ", "))
	section("Query", pl.Query())
	if pl.Partial() {
		section("CreatePartials", pl.CreatePartials())
	}
	changes := func(tbl *Table, src Source) Changes {
		ch := Changes{Source: src, CapCols: src.Needs}
		for _, n := range src.Needs {
			ch.CapTypes = append(ch.CapTypes, tbl.Columns[n])
		}
		return ch
	}
	if pl.Kind() == KindProjection {
		section("Recount", pl.Recount())
		section("CreateTarget", pl.CreateTarget())
		section("Recompute", pl.Recompute(false))
		section("Recompute upTo", pl.Recompute(true))
		section("Resync", pl.Resync(false))
		section("Resync upTo", pl.Resync(true))
		section("InsertAll", pl.InsertAll())
		section("BuildBound first", pl.BuildBound(true, 1000))
		section("BuildBound", pl.BuildBound(false, 1000))
		section("BuildPage initial", pl.BuildPage(true, true, false))
		section("BuildPage rebuild", pl.BuildPage(true, true, true))
		section("BuildPageKeys", pl.BuildPageKeys(true, true, true))
		section("BuildPageNext", pl.BuildPageNext(true, 1000))
		section("EvalKeys", pl.EvalKeys(false, false))
		if pl.Multi() {
			for pos, src := range spec.Sources()[1:] {
				section(fmt.Sprintf("AffectedAt %d (%s)", pos+1, src.Alias), pl.AffectedAt(changes(c.tables[pos+1], src), pos+1, 64))
			}
		}
	} else {
		section("CreateShapeTarget", pl.CreateShapeTarget())
		section("ShapeResync", pl.ShapeResync()...)
		section("ShapeKeys", pl.ShapeKeys())
		if pl.Kind() == KindJoin {
			section("RecomputeJoinKeys", pl.RecomputeJoinKeys()...)
		} else {
			section("RecomputeGroups", pl.RecomputeGroups(false)...)
			section("RecomputeGroups with NULLs", pl.RecomputeGroups(true)...)
		}
		section("EvalKeys", pl.EvalKeys(false, true))
		if spec.SetOp != nil {
			for pos, src := range spec.Sources() {
				section(fmt.Sprintf("AffectedBranch %d (%s)", pos, src.Alias), pl.AffectedBranch(changes(c.tables[pos], src), pos, 64))
			}
		} else if pl.Multi() {
			for pos, src := range spec.Sources() {
				section(fmt.Sprintf("AffectedAt %d (%s)", pos, src.Alias), pl.AffectedAt(changes(c.tables[pos], src), pos, 64))
			}
		} else {
			section("AffectedQueries from", pl.AffectedQueries(changes(c.tables[0], spec.Source), true, false, 64)...)
			if spec.Join != nil {
				section("AffectedQueries joined", pl.AffectedQueries(changes(c.tables[1], spec.Join.Source), false, true, 64)...)
			}
		}
	}
	names, types := pl.CheckUnit()
	section("CheckUnit", strings.Join(names, ", "), strings.Join(types, ", "))
	if pl.CheckPaged() {
		section("CheckPage", pl.CheckPage(true, true))
	} else {
		section("CheckPage", pl.CheckPage(false, false))
	}
	return b.String()
}

// TestGolden compares the SQL generated for each case with its golden
// file under testdata/; go test -run TestGolden -update rewrites them, so
// a change to generated SQL shows in review.
func TestGolden(t *testing.T) {
	t.Parallel()
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := render(t, c)
			path := filepath.Join("testdata", c.name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "no golden file: run go test ./internal/plan -run TestGolden -update")
			require.Equal(t, string(want), got, "generated SQL changed: if intended, run go test ./internal/plan -run TestGolden -update and review the diff")
		})
	}
}

// TestGoldenFilesHaveCases keeps testdata/ free of golden files no case
// writes (a renamed case would leave its old file unchecked).
func TestGoldenFilesHaveCases(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "*.golden"))
	require.NoError(t, err)
	names := map[string]bool{}
	for _, c := range goldenCases {
		names[c.name+".golden"] = true
	}
	for _, f := range files {
		require.True(t, names[filepath.Base(f)], "%s belongs to no case in goldenCases", f)
	}
}

// TestCompileRefuses checks the rules compilation applies with the
// catalog facts: each statement parses, and Compile refuses it.
func TestCompileRefuses(t *testing.T) {
	t.Parallel()
	o := table("public", "orders", "o", []string{"id"}, orders...)
	c := table("public", "customers", "c", []string{"id"}, customers...)
	r := table("public", "regions", "r", []string{"id"}, regions...)
	cases := []struct {
		stmt   string
		tables []*Table
		msg    string
	}{
		{"TRANSFORM t FROM orders o SELECT nope AS x", []*Table{o}, "column nope does not exist"},
		{"TRANSFORM t FROM orders o JOIN customers c ON o.customer_id = c.id SELECT id AS x", []*Table{o, c}, "column reference id is ambiguous"},
		{"TRANSFORM t FROM orders o JOIN customers c ON o.id = o.customer_id SELECT o.price AS p", []*Table{o, c}, "each ON equality must compare a column of o with a column of c"},
		{"TRANSFORM t FROM orders o JOIN customers c ON o.customer_id = c.id SELECT o.region AS r, c.name AS n, count(*) AS k GROUP BY o.region, c.name", []*Table{o, c}, "must all read columns of one of its tables"},
		{"TRANSFORM t FROM orders o SELECT price + 1 AS id", []*Table{o}, "column id is the target's key"},
		{"TRANSFORM t FROM orders o JOIN customers c ON o.customer_id = c.id SELECT c.name AS o_id", []*Table{o, c}, "column o_id is taken"},
		{"TRANSFORM t FROM orders o SELECT lower('x') AS g, count(*) AS n GROUP BY lower('x')", []*Table{o}, "GROUP BY needs at least one column"},
		{"TRANSFORM t FROM orders o, customers c SELECT o.price WHERE o.price > c.tier", []*Table{o, c}, "FROM o, c needs an equality of a column of o and a column of c in WHERE"},
		{"TRANSFORM t FROM orders o, customers c SELECT o.price WHERE o.id = o.customer_id", []*Table{o, c}, "FROM o, c needs an equality"},
		{"TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id SELECT *", []*Table{o, c}, "duplicate output column name id"},
		{"TRANSFORM t FROM orders o SELECT z.*", []*Table{o}, "z.* names no table"},
		{"TRANSFORM t FROM orders o SELECT DISTINCT 'x' AS a", []*Table{o}, "SELECT DISTINCT needs an output that reads a column"},
		{"TRANSFORM t FROM orders o SELECT price, rank() OVER (PARTITION BY region ORDER BY price) AS r", []*Table{o}, "PARTITION BY expression region must also be selected"},
		{"TRANSFORM t FROM orders o SELECT region, row_number() OVER (PARTITION BY region ORDER BY price) AS r", []*Table{o}, "add the key as a tie-breaker (ORDER BY ..., id)"},
		{"TRANSFORM t FROM orders o SELECT region, lag(price) OVER (PARTITION BY region ORDER BY price, customer_id) AS r", []*Table{o}, "lag(...) OVER (...) in column r depends on the order of rows"},
		{"TRANSFORM t FROM orders o SELECT region, sum(price) OVER (PARTITION BY region ORDER BY price ROWS 2 PRECEDING) AS r", []*Table{o}, "add the key as a tie-breaker"},
		{"TRANSFORM t FROM orders o SELECT region, array_agg(price) OVER (PARTITION BY region) AS r", []*Table{o}, "add the key as a tie-breaker"},
		{"TRANSFORM t FROM orders o SELECT region, price AS id, rank() OVER (PARTITION BY region ORDER BY price) AS r", []*Table{o}, "column id is taken"},
		{"TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.tier AND r.name = o.region SELECT o.price", []*Table{o, c, r},
			"the ON clause of JOIN r compares it with two tables (c and o)"},
		{"TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON c.tier = o.id SELECT o.price", []*Table{o, c, r},
			"each ON equality of JOIN r must compare a column of r with a column of a table before it"},
		{"TRANSFORM t FROM orders o JOIN customers c USING (id) JOIN regions r USING (id) SELECT o.price", []*Table{o, c, r}, "USING (...) after the second table is not supported"},
		{"TRANSFORM t FROM orders o, customers c, regions r SELECT o.price WHERE c.id = o.customer_id AND r.id > c.tier", []*Table{o, c, r}, "FROM ..., r needs an equality"},
		{"TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.tier SELECT o.region, r.name, count(*) AS n GROUP BY o.region, r.name", []*Table{o, c, r},
			"must all read columns of one of its tables"},
		{"TRANSFORM t FROM orders o SELECT id, price ORDER BY price DESC LIMIT 3", []*Table{o}, "ORDER BY ... LIMIT leaves rows that tie on ORDER BY in an arbitrary order"},
		{"TRANSFORM t FROM orders o SELECT id + 1 AS x, price ORDER BY price DESC, x LIMIT 3", []*Table{o}, "add the key as a tie-breaker (ORDER BY ..., id)"},
		{"TRANSFORM t FROM orders o SELECT id, price ORDER BY nope LIMIT 3", []*Table{o}, "ORDER BY nope is neither a column of o nor an output"},
		{"TRANSFORM t FROM orders o SELECT DISTINCT ON (customer_id) customer_id, price ORDER BY customer_id, price", []*Table{o}, "DISTINCT ON ... ORDER BY leaves rows that tie"},
		{"TRANSFORM t FROM orders o SELECT DISTINCT ON (customer_id) price ORDER BY customer_id, price, id", []*Table{o}, "DISTINCT ON expression customer_id must also be selected"},
	}
	for _, tc := range cases {
		t.Run(tc.stmt, func(t *testing.T) {
			t.Parallel()
			st, err := grammar.Parse(tc.stmt)
			require.NoError(t, err)
			tr, err := Resolve(st.(*grammar.Transform), tc.tables)
			if err == nil {
				_, _, err = Compile(tr, tc.tables)
			}
			var e *errs.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, trellistype.CodeValidation, e.Code)
			require.Contains(t, e.Msg, tc.msg)
		})
	}
}

// planOf compiles a golden case into the plan the engine would build, with
// the target's types recorded, and the old values each table captures.
func planOf(t *testing.T, c goldenCase) (*Plan, [][]string) {
	t.Helper()
	st, err := grammar.Parse(c.stmt)
	require.NoError(t, err)
	tr := st.(*grammar.Transform)
	var spec Spec
	var needs [][]string
	if tr.SetOp != nil {
		// A set operation: each branch's tables in turn.
		first := *tr
		first.SetOp = nil
		var resolved []*grammar.Transform
		var byBranch [][]*Table
		at := 0
		branches := append([]*grammar.Transform{&first}, tr.SetOp.Branches...)
		if tr.SetOp.Over {
			branches = tr.SetOp.Branches
		}
		for _, b := range branches {
			n := 1 + len(b.Joins) + len(b.SubJoins)
			r, err := Resolve(b, c.tables[at:at+n])
			require.NoError(t, err)
			resolved = append(resolved, r)
			byBranch = append(byBranch, c.tables[at:at+n])
			at += n
		}
		if tr.SetOp.Over {
			spec, needs, err = CompileSetOpOver(tr.SetOp.Tree, resolved, byBranch, tr)
		} else {
			spec, needs, err = CompileSetOp(tr.SetOp.Tree, resolved, byBranch, tr.WithoutSourceIndex)
		}
		require.NoError(t, err)
	} else {
		tr, err = Resolve(tr, c.tables)
		require.NoError(t, err)
		spec, needs, err = Compile(tr, c.tables)
		require.NoError(t, err)
	}
	for _, a := range c.alter {
		st, err := grammar.Parse(a)
		require.NoError(t, err)
		alt := st.(*grammar.Alter)
		if alt.Action == grammar.AlterAddColumn {
			spec, err = AddColumn(spec, alt.Column, c.tables)
			require.NoError(t, err)
		} else {
			spec = DropColumn(spec, alt.Column.Name)
		}
	}
	for i := range spec.Key {
		spec.Key[i].Type = c.types[spec.Key[i].Name]
	}
	for i := range spec.Columns {
		spec.Columns[i].Type = c.types[spec.Columns[i].Name]
		for _, p := range c.paused {
			if spec.Columns[i].Name == p {
				spec.Columns[i].Paused = true
			}
		}
	}
	if c.ops != nil {
		spec.SetOps(c.ops, func(pos int, col string) string { return c.tables[pos].Columns[col] })
	}
	spec.Source.ID = 1
	for i, j := range spec.JoinList() {
		j.Source.ID = 2 + i
	}
	for i := range spec.Semis {
		spec.Semis[i].Source.ID = 2 + len(spec.JoinList()) + i
	}
	if spec.SetOp != nil {
		spec.SetOp.SetIDs(func(pos int) int { return 1 + pos })
	}
	pl := &Plan{Target: Target{Schema: "public", Name: tr.Target.Name}, Spec: spec}
	if tr.Target.Schema != "" {
		pl.Target.Schema = tr.Target.Schema
	}
	if c.partTypes != nil {
		ps := PartialsFor(pl.Spec, pl.Target)
		require.NotNil(t, ps)
		require.Len(t, ps.Parts, len(c.partTypes))
		for i := range ps.Parts {
			ps.Parts[i].Type = c.partTypes[i]
		}
		pl.Spec.Partials = ps
		require.True(t, pl.Partial())
	}
	return pl, needs
}
