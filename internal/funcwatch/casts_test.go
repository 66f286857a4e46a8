package funcwatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/funcwatch"
	"github.com/trellis-pg/trellis/internal/testsupport"
)

// UserCasts finds a user's cast to or from text of a type, of its array's
// element and of a domain's base type, in either direction, and leaves out
// pg_catalog's casts, I/O casts and an extension's (citext's casts with
// bpchar are functions of its own).
func TestUserCasts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, db := testsupport.Pool(t)
	for _, q := range []string{
		`CREATE EXTENSION citext`,
		`CREATE TYPE public.tag AS ENUM ('a', 'b')`,
		`CREATE DOMAIN public.dtag AS public.tag`,
		`CREATE TYPE public.mood AS ENUM ('ok')`,
		`CREATE FUNCTION public.text_mood(text) RETURNS public.mood LANGUAGE sql AS $$SELECT 'ok'::public.mood$$`,
	} {
		_, err := db.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	casts := func(types ...string) []funcwatch.Cast {
		t.Helper()
		cs, err := funcwatch.UserCasts(ctx, db, types)
		require.NoError(t, err)
		return cs
	}
	require.Empty(t, casts("integer", "text", "bytea[]", "public.citext", "public.tag", "public.dtag[]", "public.mood"))
	_, err := db.Exec(ctx, `CREATE FUNCTION public.tag_text(public.tag) RETURNS text LANGUAGE sql AS $$SELECT 'x'$$`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `CREATE CAST (public.tag AS text) WITH FUNCTION public.tag_text(public.tag)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `CREATE CAST (text AS public.mood) WITH FUNCTION public.text_mood(text)`)
	require.NoError(t, err)
	want := funcwatch.Cast{Cast: "(public.tag AS text)", Function: "public.tag_text(public.tag)"}
	for _, typ := range []string{"public.tag", "public.tag[]", "public.dtag", "public.dtag[] /* a comment */"} {
		cs := casts("integer", typ)
		require.Len(t, cs, 1, typ)
		require.Equal(t, want.Cast, cs[0].Cast, typ)
		require.Contains(t, cs[0].Function, want.Function[:len("public.tag_text(")], typ)
		require.NotEmpty(t, cs[0].Owner)
		require.Contains(t, cs[0].Fix(), "DROP CAST (public.tag AS text)")
	}
	cs := casts("public.mood")
	require.Len(t, cs, 1)
	require.Equal(t, "(text AS public.mood)", cs[0].Cast)
	require.Empty(t, casts("public.citext", "integer[]"))
}
