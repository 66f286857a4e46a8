package cli_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
)

// waitQuarantined polls Quarantined until ok accepts its entries by
// address, and fails the test with the last answer after a deadline.
func (e *env) waitQuarantined(c *trellis.Client, what string, ok func(map[string]trellis.QuarantineEntry) bool) {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last []trellis.QuarantineEntry
	for {
		all, err := c.Quarantined(e.ctx)
		require.NoError(e.t, err)
		byTarget := map[string]trellis.QuarantineEntry{}
		for _, q := range all {
			byTarget[q.Target] = q
		}
		if ok(byTarget) {
			return
		}
		last = all
		if time.Now().After(deadline) {
			e.t.Fatalf("waiting for %s: the quarantine never got there; last %+v", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestQuarantineCommands(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL, b int NOT NULL);
INSERT INTO items SELECT g, g, 1 FROM generate_series(1, 20) g`)
	e.ok("migrate")
	c := e.workers()
	require.Equal(t, "nothing is quarantined\n", e.ok("quarantined").stdout)
	require.Equal(t, "[]\n", e.ok("quarantined", "--json").stdout)

	e.ok("apply", "TRANSFORM r FROM items SELECT a / b AS ratio")
	e.ok("apply", "TRANSFORM r2 FROM items SELECT a AS q")
	e.waitLive(c, "r")
	e.waitLive(c, "r2")
	// Two rows r.ratio fails on (the column is quarantined), and a row the
	// target of r2 refuses (the key is poisoned for r2 only).
	e.exec(`ALTER TABLE r2 ADD CONSTRAINT c CHECK (q < 100)`)
	e.exec(`INSERT INTO items VALUES (101, 1, 0), (102, 2, 0), (500, 500, 1)`)
	e.waitQuarantined(c, "r.ratio paused on 2 rows and r2 holding 1 key", func(m map[string]trellis.QuarantineEntry) bool {
		col, held := m["r.ratio"], m["r2"]
		return col.State == trellis.StatePaused && col.Rows == 2 && held.HeldKeys != nil && held.HeldKeys.Count == 1
	})

	// quarantined: a line per entry, its reason, and how to list its rows.
	lines := e.ok("quarantined").lines()
	require.Len(t, lines, 6, strings.Join(lines, "\n"))
	require.Regexp(t, `^r\.ratio  paused  2 rows failed  since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, lines[0])
	require.Regexp(t, `^    quarantined: its expression failed on 2 row\(s\) \(.*division by zero.*RESUME TRANSFORM r\.ratio$`, lines[1])
	require.Equal(t, "    list them: trellis sample r.ratio", lines[2])
	require.Regexp(t, `^r2  live  1 key held  since \S+Z$`, lines[3])
	require.Contains(t, lines[4], "holds 1 poisoned key(s)")
	require.Equal(t, "    list them: trellis sample r2; release one: trellis release-key r2 TABLE KEY", lines[5])

	var entries []map[string]any
	require.NoError(t, json.Unmarshal([]byte(e.ok("quarantined", "--json").stdout), &entries))
	require.Len(t, entries, 2)
	require.Equal(t, "r.ratio", entries[0]["target"])
	require.Equal(t, "paused", entries[0]["state"])
	require.EqualValues(t, 2, entries[0]["rows"])
	require.Equal(t, pgerrcode.DivisionByZero, entries[0]["sqlstate"])
	require.Nil(t, entries[0]["held_keys"])
	require.Equal(t, "r2", entries[1]["target"])
	require.Equal(t, "live", entries[1]["state"])
	require.EqualValues(t, 1, entries[1]["held_keys"].(map[string]any)["count"])

	// sample: one page at a time, through the cursor it prints.
	lines = e.ok("sample", "r.ratio", "--limit", "1").lines()
	require.Len(t, lines, 3, strings.Join(lines, "\n"))
	require.Regexp(t, `^SRC_TABLE\s+KEY\s+ERROR$`, lines[0])
	require.Regexp(t, `^public\.items\s+101\s+.*division by zero`, lines[1])
	m := regexp.MustCompile(`^next page: trellis sample r\.ratio --limit 1 --after (\S+)$`).FindStringSubmatch(lines[2])
	require.NotNil(t, m, lines[2])
	lines = e.ok("sample", "r.ratio", "--limit", "1", "--after", m[1]).lines()
	require.Len(t, lines, 2, "the last page prints no next page: %s", strings.Join(lines, "\n"))
	require.Regexp(t, `^public\.items\s+102\s+.*division by zero`, lines[1])
	var page struct {
		Samples []struct {
			SrcTable string `json:"src_table"`
			Key      string `json:"key"`
			Error    string `json:"error"`
		} `json:"samples"`
		NextCursor *string `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.ok("sample", "r.ratio", "--json", "--limit", "1").stdout), &page))
	require.Len(t, page.Samples, 1)
	require.Equal(t, "101", page.Samples[0].Key)
	require.NotNil(t, page.NextCursor)
	require.Equal(t, m[1], *page.NextCursor)
	lines = e.ok("sample", "r2").lines()
	require.Len(t, lines, 2)
	require.Regexp(t, `^public\.items\s+500\s+.*check constraint "c"`, lines[1])

	r := e.run("sample", "r.ratio", "--after", "bogus")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `trellis: --after: "bogus" is not a Trellis sample cursor (pass the cursor a previous page printed)`)
	r = e.run("sample", "r.nope")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "has no column nope")

	// poisoned: oldest first, then the time to poll from next.
	lines = e.ok("poisoned", "--since", "1h").lines()
	require.Len(t, lines, 3, strings.Join(lines, "\n"))
	require.Regexp(t, `^POISONED_AT\s+TRANSFORM\s+SRC_TABLE\s+KEY\s+ERROR$`, lines[0])
	require.Regexp(t, `^\S+Z\s+public\.r2\s+public\.items\s+500\s+.*check constraint "c"`, lines[1])
	m = regexp.MustCompile(`^next: trellis poisoned --since (\S+)$`).FindStringSubmatch(lines[2])
	require.NotNil(t, m, lines[2])
	next, err := time.Parse(time.RFC3339Nano, m[1])
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(lines[1], m[1]+" "), "the hint is the last entry's time: %s", lines[1])
	require.Equal(t, "no keys poisoned since "+m[1]+"\n", e.ok("poisoned", "--since", m[1]).stdout)
	require.Equal(t, "[]\n", e.ok("poisoned", "--since", m[1], "--json").stdout)
	var poisoned []struct {
		Transform  string    `json:"transform"`
		SrcTable   string    `json:"src_table"`
		Key        string    `json:"key"`
		Error      string    `json:"error"`
		PoisonedAt time.Time `json:"poisoned_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.ok("poisoned", "--json", "--since", next.Add(-time.Second).Format(time.RFC3339)).stdout), &poisoned))
	require.Len(t, poisoned, 1)
	require.Equal(t, "public.r2", poisoned[0].Transform)
	require.Equal(t, "500", poisoned[0].Key)
	require.True(t, next.Equal(poisoned[0].PoisonedAt), "%s vs %s", next, poisoned[0].PoisonedAt)

	// status: each quarantine with its fix.
	st := e.ok("status", "r2").stdout
	require.Contains(t, st, "except what is quarantined below")
	require.Regexp(t, "\nheld keys: 1 key held since \\S+Z\n", st)
	require.Contains(t, st, "list them with `trellis sample r2`, fix the rows, then `trellis release-key r2 TABLE KEY` for each, "+
		"or `trellis apply 'RESUME TRANSFORM r2'` to release them all\n")
	require.Contains(t, st, "\n  trellis release-key r2 public.items 500   # ")
	st = e.ok("status", "r").stdout
	require.Regexp(t, `\nquarantined column: r\.ratio since \S+Z: its expression failed on 2 rows: .*division by zero`, st)
	require.Contains(t, st, "list the rows with `trellis sample r.ratio`")
	require.Contains(t, st, "then `trellis apply 'RESUME TRANSFORM r.ratio'` re-derives the column")
	require.NotContains(t, st, "held keys")
	var stj struct {
		Cols []map[string]any `json:"quarantined_columns"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.ok("status", "--json", "r").stdout), &stj))
	require.Len(t, stj.Cols, 1)
	require.Equal(t, "r.ratio", stj.Cols[0]["target"])
	require.NoError(t, json.Unmarshal([]byte(e.ok("status", "--json", "r2").stdout), &stj))
	require.Empty(t, stj.Cols)

	// release-key: a key not held, an unknown transform, a key whose cause
	// remains, then one that was fixed.
	r = e.run("release-key", "r2", "items", "1")
	require.Equal(t, cli.ExitError, r.code)
	require.Empty(t, r.stdout)
	require.Equal(t, "trellis: public.r2 holds no key 1 of items\n", r.stderr)
	r = e.run("release-key", "nope", "items", "1")
	require.Equal(t, cli.ExitError, r.code)
	require.Equal(t, "trellis: no transform writes nope\n", r.stderr)
	r = e.run("release-key", "r2", "items", "500")
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "released key 500 of public.items held by public.r2, but re-deriving it failed again, so it is held again: ")
	require.Contains(t, r.stderr, `check constraint "c"`)
	require.NotContains(t, r.stderr, "level=WARN", "the command reports the failure itself")
	require.Contains(t, e.ok("status", "r2").stdout, "held keys: 1 key held")

	e.exec(`UPDATE items SET a = 50 WHERE id = 500`)
	r = e.ok("release-key", "r2", "public.items", "500")
	require.Equal(t, "released key 500 of public.items held by r2: it was re-derived from its current row\n", r.stdout)
	var q int
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT q FROM r2 WHERE id = 500`).Scan(&q))
	require.Equal(t, 50, q)
	require.NotContains(t, e.ok("status", "r2").stdout, "held keys")
	lines = e.ok("quarantined").lines()
	require.Len(t, lines, 3, strings.Join(lines, "\n"))
	require.True(t, strings.HasPrefix(lines[0], "r.ratio  paused"), lines[0])

	// Fixed rows leave the column's sample; RESUME re-derives it.
	e.exec(`UPDATE items SET b = 1 WHERE b = 0`)
	e.waitQuarantined(c, "r.ratio with no failed rows", func(m map[string]trellis.QuarantineEntry) bool {
		return m["r.ratio"].Rows == 0
	})
	require.Equal(t, "no rows are quarantined under r.ratio\n", e.ok("sample", "r.ratio").stdout)
	require.Equal(t, "resumed r.ratio\n", e.ok("apply", "RESUME TRANSFORM r.ratio").stdout)
	e.waitQuarantined(c, "nothing quarantined", func(m map[string]trellis.QuarantineEntry) bool { return len(m) == 0 })
	require.Equal(t, "nothing is quarantined\n", e.ok("quarantined").stdout)
	require.NotContains(t, e.ok("status", "r").stdout, "quarantined column")
}
