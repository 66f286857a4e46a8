package capture_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/capture"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

// AsText renders a value of a type outside pg_catalog (an enum, a domain
// over one, a composite, a range, arrays of them) exactly as its cast to
// text did before a cast of the owner's existed (the drain reads that text
// back), NULL as NULL and a composite of NULL fields as "(,)"; a planted
// cast to text on the type never runs, while a plain ::text runs it.
func TestAsTextRunsNoUserCast(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, db := testsupport.Pool(t)
	cases := []struct{ typ, val string }{
		{"public.mood", `'ok'`},
		{"public.mood[]", `ARRAY['ok', NULL, 'sad ''x''']::public.mood[]`},
		{"public.dmood", `'sad ''x'''`},
		{"public.pair", `ROW('ok', 'a "b", c')::public.pair`},
		{"public.pair", `ROW(NULL, NULL)::public.pair`},
		{"public.pair[]", `ARRAY[ROW('ok', 'x')::public.pair]`},
		{"public.moodrange", `public.moodrange('ok', 'sad ''x''')`},
		{"public.mood", `NULL`},
		{"public.pair", `NULL`},
		{"bytea", `'\x6b31'::bytea`},
		{"integer", `NULL::int`},
	}
	for _, q := range []string{
		`CREATE TYPE public.mood AS ENUM ('ok', 'sad ''x''')`,
		`CREATE DOMAIN public.dmood AS public.mood`,
		`CREATE TYPE public.pair AS (m public.mood, s text)`,
		`CREATE TYPE public.moodrange AS RANGE (subtype = public.mood)`,
	} {
		_, err := db.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	want := map[int]*string{}
	for i, c := range cases {
		var s *string
		require.NoError(t, db.QueryRow(ctx, `SELECT (`+c.val+`)::`+c.typ+`::text`).Scan(&s), c.val)
		want[i] = s
	}
	for _, q := range []string{
		`CREATE TABLE public.hits (what text)`,
		`CREATE FUNCTION public.planted(public.mood) RETURNS text LANGUAGE sql AS $$INSERT INTO public.hits VALUES ('mood'); SELECT 'planted'$$`,
		`CREATE CAST (public.mood AS text) WITH FUNCTION public.planted(public.mood)`,
		`CREATE FUNCTION public.planted_pair(public.pair) RETURNS text LANGUAGE sql AS $$INSERT INTO public.hits VALUES ('pair'); SELECT 'planted'$$`,
		`CREATE CAST (public.pair AS text) WITH FUNCTION public.planted_pair(public.pair)`,
	} {
		_, err := db.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	for i, c := range cases {
		var got *string
		q := `SELECT ` + capture.AsText(`x`, c.typ) + ` FROM (SELECT (` + c.val + `)::` + c.typ + `) AS v(x)`
		require.NoError(t, db.QueryRow(ctx, q).Scan(&got), q)
		require.Equal(t, want[i], got, "%s %s", c.typ, c.val)
	}
	var hits int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM public.hits`).Scan(&hits))
	require.Zero(t, hits, "a planted cast ran")
	// The plants work: a cast to text runs them.
	var s string
	require.NoError(t, db.QueryRow(ctx, `SELECT 'ok'::public.mood::text`).Scan(&s))
	require.Equal(t, "planted", s)
}
