package plan

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// indexScans lists the indexes a JSON plan's nodes scan.
func indexScans(node map[string]any) []string {
	var out []string
	eachPlanNode(node, func(n map[string]any) {
		if name, ok := n["Index Name"].(string); ok {
			out = append(out, name)
		}
	})
	return out
}

// TestArrayOfUserTypeKeyFoundByIndex: a key whose type is an array of an
// enum of another schema's (read from its text by the array type's input
// function, not a cast: decision 0041) still finds a page's source rows
// and target rows through their key indexes, in the generic plan a drain
// worker's prepared statement gets after a few pages.
func TestArrayOfUserTypeKeyFoundByIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl, _ := planOf(t, goldenCase{
		name:   "array_key",
		stmt:   "TRANSFORM by_arr FROM arr SELECT m, v * 2 AS w",
		tables: []*Table{table("public", "arr", "", []string{"m"}, "m app.mood[]", "v integer")},
		types:  map[string]string{"m": "app.mood[]", "w": "integer"},
	})
	recompute := pl.Recompute(false)
	require.NotContains(t, recompute, "::app.mood[]", "the key is cast from text")
	conn, exec := testConn(ctx, t)
	exec("CREATE SCHEMA app")
	exec("CREATE TYPE app.mood AS ENUM ('low', 'mid', 'high')")
	exec("CREATE TABLE public.arr (m app.mood[] PRIMARY KEY, v integer NOT NULL)")
	// 20,000 distinct arrays: g's digits in base 3, as moods.
	exec(`INSERT INTO public.arr SELECT ARRAY(SELECT (enum_range(NULL::app.mood))[1 + (g / 3 ^ i)::int % 3] FROM generate_series(0, 9) i), g
FROM generate_series(1, 20000) g`)
	for _, q := range strings.Split(pl.CreateTarget(), ";\n") {
		exec(q)
	}
	exec("INSERT INTO public.by_arr SELECT m, v * 2 FROM public.arr")
	exec("ANALYZE public.arr")
	exec("ANALYZE public.by_arr")
	exec("SET search_path = pg_catalog, pg_temp")
	exec("SET plan_cache_mode = force_generic_plan")
	exec("PREPARE r AS " + recompute)
	// Every 40th key, as the text capture records: a text[] literal.
	var keys string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_catalog.quote_literal(pg_catalog.array_agg(pg_catalog.format('%s', m))::text)
FROM public.arr WHERE v % 40 = 0`).Scan(&keys))
	raw, plan := explainJSON(ctx, t, conn, "EXPLAIN (FORMAT JSON) EXECUTE r("+keys+")")
	scans := indexScans(plan["Plan"].(map[string]any))
	require.Contains(t, scans, "arr_pkey", "%s", raw)
	require.Contains(t, scans, "by_arr_pkey", "%s", raw)
}

// TestArrayOfUserTypeGroupFoundByIndex: the same for an aggregate grouped
// by an array of a domain of another schema's: a page's groups are found
// through the source's index on the grouped column and the target's key
// index.
func TestArrayOfUserTypeGroupFoundByIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl, _ := planOf(t, goldenCase{
		name:   "array_group",
		stmt:   "TRANSFORM by_tags FROM tagged SELECT tags, sum(v) AS s GROUP BY tags",
		tables: []*Table{table("public", "tagged", "", []string{"id"}, "id integer", "tags app.posint[]", "v integer")},
		types:  map[string]string{"tags": "app.posint[]", "s": "bigint"},
	})
	recompute := pl.RecomputeGroups(false)
	require.Len(t, recompute, 1)
	require.NotContains(t, recompute[0], "::app.posint[]", "the group is cast from text")
	conn, exec := testConn(ctx, t)
	exec("CREATE SCHEMA app")
	exec("CREATE DOMAIN app.posint AS integer CHECK (VALUE > 0)")
	exec("CREATE TABLE public.tagged (id integer PRIMARY KEY, tags app.posint[] NOT NULL, v integer NOT NULL)")
	exec("CREATE INDEX ON public.tagged (tags)")
	exec(`INSERT INTO public.tagged SELECT g, ARRAY[1 + g % 5000, 1 + g % 7]::app.posint[], g FROM generate_series(1, 50000) g`)
	buildTarget(exec, pl)
	exec("ANALYZE public.tagged")
	exec("ANALYZE public.by_tags")
	exec("SET search_path = pg_catalog, pg_temp")
	exec("SET plan_cache_mode = force_generic_plan")
	exec("PREPARE r AS " + recompute[0])
	// Every 50th group, as the text capture records: a text[] literal.
	var groups string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_catalog.quote_literal(pg_catalog.array_agg(DISTINCT pg_catalog.format('%s', tags))::text)
FROM public.tagged WHERE id % 50 = 0`).Scan(&groups))
	raw, plan := explainJSON(ctx, t, conn, "EXPLAIN (FORMAT JSON) EXECUTE r("+groups+")")
	scans := indexScans(plan["Plan"].(map[string]any))
	require.Contains(t, scans, "tagged_tags_idx", "%s", raw)
	require.Contains(t, scans, "by_tags_tags_idx", "%s", raw) // the target key's unique index
}

// TestDomainOverCitextGroupFoundByIndex: a group of a domain over citext
// (compared by citext's operators, element by element: see overDomain)
// is still found through the source's index on the grouped column and
// the target's key index.
func TestDomainOverCitextGroupFoundByIndex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, exec := testConn(ctx, t)
	var avail bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'citext')`).Scan(&avail))
	if !avail {
		t.Skip("the citext extension is not installed on this server (Debian: postgresql-contrib)")
	}
	pl, _ := planOf(t, goldenCase{
		name:   "domain_group",
		stmt:   "TRANSFORM by_addr FROM mail SELECT addr, sum(v) AS s GROUP BY addr",
		tables: []*Table{table("public", "mail", "", []string{"id"}, "id integer", "addr app.email", "v integer")},
		types:  map[string]string{"addr": "app.email", "s": "bigint"},
		ops:    map[string]*Op{"app.email": {Schema: "ext", Type: "ext.citext"}},
	})
	recompute := pl.RecomputeGroups(false)
	require.Len(t, recompute, 1)
	require.NotContains(t, recompute[0], "::ext.citext[]", "the parameter is coerced as a whole")
	exec("CREATE SCHEMA ext")
	exec("CREATE EXTENSION citext SCHEMA ext")
	exec("CREATE SCHEMA app")
	exec("CREATE DOMAIN app.email AS ext.citext")
	exec("CREATE TABLE public.mail (id integer PRIMARY KEY, addr app.email NOT NULL, v integer NOT NULL)")
	exec("CREATE INDEX ON public.mail (addr)")
	exec(`INSERT INTO public.mail SELECT g, 'user' || (g % 5000), g FROM generate_series(1, 50000) g`)
	buildTarget(exec, pl)
	exec("ANALYZE public.mail")
	exec("ANALYZE public.by_addr")
	exec("SET search_path = pg_catalog, pg_temp")
	exec("SET plan_cache_mode = force_generic_plan")
	exec("PREPARE r AS " + recompute[0])
	var groups string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_catalog.quote_literal(pg_catalog.array_agg(DISTINCT pg_catalog.upper(addr::text))::text)
FROM public.mail WHERE id % 50 = 0`).Scan(&groups))
	raw, plan := explainJSON(ctx, t, conn, "EXPLAIN (FORMAT JSON) EXECUTE r("+groups+")")
	scans := indexScans(plan["Plan"].(map[string]any))
	require.Contains(t, scans, "mail_addr_idx", "%s", raw)
	require.Contains(t, scans, "by_addr_addr_idx", "%s", raw) // the target key's unique index
}
