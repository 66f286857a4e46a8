package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
)

func TestSelfCheckCommand(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g FROM generate_series(1, 100) g`)
	e.ok("migrate")
	c := e.workers()
	e.ok("apply", "TRANSFORM copy FROM items SELECT v * 2 AS w")
	e.waitLive(c, "copy")

	r := e.ok("self-check", "copy")
	require.Equal(t, []string{"copy: consistent  100 keys compared (standard mode)"}, r.lines())

	// Rows changed behind Trellis's back: listed, and the exit status says so.
	e.exec(`UPDATE copy SET w = 0 WHERE id = 3`)
	e.exec(`DELETE FROM copy WHERE id = 4`)
	e.exec(`INSERT INTO copy VALUES (1000, 1)`)
	r = e.run("self-check", "public.copy", "--mode", "strict", "--timeout", "10s")
	require.Equal(t, cli.ExitFound, r.code, r.stderr)
	require.Equal(t, []string{
		"copy: diverged  101 keys compared (strict mode): 1 missing, 1 extra, 1 differing",
		"  differing  3  w: 0 in the target, 6 recomputed",
		"  missing    4  recomputed {w=8}",
		"  extra      1000  in the target {w=1}",
	}, r.lines())
	require.Equal(t, "trellis: copy diverged from a fresh recompute: 1 missing, 1 extra, 1 differing\n", r.stderr)

	r = e.run("self-check", "copy", "--json")
	require.Equal(t, cli.ExitFound, r.code, r.stderr)
	var job map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &job))
	require.Equal(t, "public.copy", job["target"])
	require.Equal(t, "done", job["state"])
	require.Equal(t, "standard", job["mode"])
	require.Nil(t, job["error"])
	rep := job["report"].(map[string]any)
	require.Equal(t, "diverged", rep["outcome"])
	require.EqualValues(t, 101, rep["rows_compared"])
	require.EqualValues(t, 1, rep["missing"])
	require.Len(t, rep["divergences"], 3)
	d := rep["divergences"].([]any)[0].(map[string]any)
	require.Equal(t, "differing", d["kind"])
	require.Equal(t, "3", d["key"])
	require.Equal(t, []any{"w"}, d["columns"])
	require.Equal(t, map[string]any{"w": "0"}, d["target"])
	require.Equal(t, []any{}, rep["drain_failures"])
	require.Nil(t, rep["held_keys"])

	r = e.run("self-check", "nope")
	require.Equal(t, cli.ExitError, r.code)
	require.Equal(t, "trellis: no transform writes nope\n", r.stderr)
}

func TestSelfCheckUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"self-check", "--url", "postgres://x"}, "expected one TARGET, got 0 arguments"},
		{[]string{"self-check", "t", "--mode", "sloppy", "--url", "postgres://x"}, `--mode is standard or strict, not "sloppy"`},
		{[]string{"self-check", "t", "--timeout", "0s", "--url", "postgres://x"}, "--timeout must be positive, not 0s"},
	} {
		r := runIn(context.Background(), "", tc.args...)
		require.Equal(t, cli.ExitUsage, r.code, "%v: %s", tc.args, r.stderr)
		require.True(t, strings.HasPrefix(r.stderr, "trellis: "), r.stderr)
		require.Contains(t, r.stderr, tc.msg, "%v", tc.args)
	}
}
