package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/internal/testsupport"
)

// TestPageRowsDecodeAsScanned: a page row read from the wire (pageRow)
// holds what pgx's own Scan gives for it: NULL and empty arrays, NULL and
// empty elements, quotes, braces, commas, backslashes and multibyte text;
// and a row in another form (a two-dimensional array, text format) is
// still read, by Scan.
func TestPageRowsDecodeAsScanned(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, pool := testsupport.Pool(t)
	arrays := []string{
		"NULL", "'{}'", "ARRAY[NULL]::text[]", "ARRAY['']", "ARRAY['42']", "ARRAY['a', NULL, '']",
		`ARRAY['{"x": 1}', 'a,b', '"q"', E'back\\slash', 'NULL', ' space ', 'héllo wörld ✓']`,
		"ARRAY(SELECT g::text FROM generate_series(1, 300) g)",
	}
	scanned := func(rows pgx.Rows) (Change, []*string) {
		var c Change
		var key []*string
		require.NoError(t, rows.Scan(&c.Src, &key, &c.Vals, &c.Bucket, &c.Mislabeled))
		return c, key
	}
	for _, k := range arrays {
		for _, v := range arrays {
			q := "SELECT 7::int4, (" + k + ")::text[], (" + v + ")::text[], 63::int4, true"
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
				var want, got Change
				var wantKey, gotKey []*string
				for i, read := range []func(pgx.Rows){
					func(r pgx.Rows) { want, wantKey = scanned(r) },
					func(r pgx.Rows) {
						if mode == pgx.QueryExecModeCacheStatement {
							require.NoError(t, decodePageRow(r, &got, &gotKey), "the binary form is decoded, not scanned")
						}
						require.NoError(t, pageRow(r, &got, &gotKey))
					},
				} {
					got, gotKey = Change{}, nil
					rows, err := pool.Query(ctx, q, mode)
					require.NoError(t, err)
					require.True(t, rows.Next(), "%d %s", i, q)
					read(rows)
					rows.Close()
					require.NoError(t, rows.Err())
				}
				require.Equal(t, want, got, q)
				require.Equal(t, wantKey, gotKey, q)
				require.Equal(t, wantKey == nil, gotKey == nil, "NULL stays nil, {} stays empty: %s", q)
				require.Equal(t, want.Vals == nil, got.Vals == nil, "NULL stays nil, {} stays empty: %s", q)
			}
		}
	}
	// Two dimensions: not the form decoded, so scanned as before (which
	// pgx refuses for a one-dimensional slice, as it did).
	rows, err := pool.Query(ctx, "SELECT 7::int4, ARRAY[ARRAY['a'], ARRAY['b']], NULL::text[], 1::int4, false")
	require.NoError(t, err)
	require.True(t, rows.Next())
	var c Change
	var key []*string
	require.ErrorIs(t, decodePageRow(rows, &c, &key), errRowShape)
	_ = pageRow(rows, &c, &key)
	rows.Close()
}
