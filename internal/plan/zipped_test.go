package plan

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/testsupport"
)

// TestTypedKeyParamsKeepColumnNamesThatSpellAnElement: a keyed recompute
// whose key parameters are typed with their own type (decision 0037)
// unnests them in the select list, and a key column whose name spells
// the element it is read from ("u.k2") keeps its name there: the element
// was once replaced inside the quoted name too, and the recompute failed
// on a column that did not exist.
func TestTypedKeyParamsKeepColumnNamesThatSpellAnElement(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pl, _ := planOf(t, goldenCase{
		name:   "enum_key_named_like_an_element",
		stmt:   "TRANSFORM moods_copy FROM moods SELECT n",
		tables: []*Table{table("public", "moods", "", []string{"m", "u.k2"}, "m public.mood", "u.k2 text", "n integer")},
		types:  map[string]string{"n": "integer"},
	})
	conn, err := pgx.Connect(ctx, testsupport.Database(t))
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	for _, q := range []string{
		"CREATE TYPE public.mood AS ENUM ('sad', 'ok')",
		`CREATE TABLE public.moods (m public.mood, "u.k2" text, n integer, PRIMARY KEY (m, "u.k2"))`,
		`CREATE TABLE public.moods_copy (m public.mood, "u.k2" text, n integer, PRIMARY KEY (m, "u.k2"))`,
		"INSERT INTO public.moods VALUES ('ok', 'x', 1), ('sad', 'y', 2)",
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	q := pl.Recompute(false)
	_, err = conn.Exec(ctx, q, []string{"ok"}, []string{"x"})
	require.NoError(t, err, q)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT n FROM public.moods_copy WHERE m = 'ok' AND "u.k2" = 'x'`).Scan(&n))
	require.Equal(t, 1, n)
}
