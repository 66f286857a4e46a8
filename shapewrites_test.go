package trellis_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// locations maps each target row's key (its text) to the row's physical
// location and creating transaction: a row rewritten by the drain moves.
func (e *env) locations(target, key string) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for _, r := range e.rows(fmt.Sprintf(`SELECT (%s)::text, ctid::text || '/' || xmin::text FROM %s`, key, target)) {
		out[r[0]] = r[1]
	}
	return out
}

// A GROUP BY, a LEFT JOIN and a window rewrite only the target rows whose
// values change: a change that leaves a group's aggregates, a joined row
// or a partition's rows as they were writes nothing to the target (no
// new row version, no dead tuple), while changed, gone and new rows
// follow. NULL groups and the NULL keys of a left join's missing side are
// kept too.
func TestShapesWriteOnlyChangedRows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE wo_items (id int PRIMARY KEY, grp int, v int NOT NULL, note text)`)
	e.exec(`CREATE INDEX ON wo_items (grp)`)
	e.exec(`CREATE TABLE wo_tags (id int PRIMARY KEY, label text)`)
	e.exec(`INSERT INTO wo_tags VALUES (1, 'one'), (2, 'two')`)
	// Groups 1, 2, 3 and NULL; group 3 has no tag.
	e.exec(`INSERT INTO wo_items SELECT g, CASE WHEN g % 4 = 0 THEN NULL ELSE g % 4 END, g, '' FROM generate_series(1, 40) g`)
	c := e.engine()
	for _, def := range []string{
		"TRANSFORM wo_sums FROM wo_items SELECT grp AS grp, sum(v) AS total, count(*) AS n GROUP BY grp",
		"TRANSFORM wo_labeled FROM wo_items i LEFT JOIN wo_tags t ON t.id = i.grp SELECT i.id AS id, t.label AS label, i.v AS v",
		"TRANSFORM wo_win FROM wo_items SELECT grp AS grp, v AS v, sum(v) OVER (PARTITION BY grp) AS part",
	} {
		_, err := c.Define(e.ctx, def)
		require.NoError(t, err)
	}
	for _, tg := range []string{"wo_sums", "wo_labeled", "wo_win"} {
		e.waitState(c, tg, trellis.StateLive)
	}
	sums := e.locations("wo_sums", "grp")
	labeled := e.locations("wo_labeled", "ARRAY[id, t_id]")
	win := e.locations("wo_win", "ARRAY[grp, id]")
	require.Len(t, sums, 4)
	require.Contains(t, labeled, "{3,NULL}")

	tx, err := e.db.Begin(e.ctx)
	require.NoError(t, err)
	for _, q := range []string{
		// Group 1 (ids 1, 5, ...) keeps its sum: one row up, one down.
		`UPDATE wo_items SET v = v + 1 WHERE id = 1`,
		`UPDATE wo_items SET v = v - 1 WHERE id = 5`,
		// A column no transform reads, on every row of groups 3 and NULL.
		`UPDATE wo_items SET note = 'x' WHERE grp = 3 OR grp IS NULL`,
		// Group 2 changes; group 3's last row moves to group 2.
		`UPDATE wo_items SET v = v + 100 WHERE id = 2`,
		`DELETE FROM wo_items WHERE grp = 3 AND id <> 3`,
		`UPDATE wo_items SET grp = 2 WHERE id = 3`,
		// A new group.
		`INSERT INTO wo_items VALUES (41, 5, 7, '')`,
	} {
		_, err := tx.Exec(e.ctx, q)
		require.NoError(t, err, q)
	}
	require.NoError(t, tx.Commit(e.ctx))
	e.converge(c)

	e.assertIdentical("SELECT grp, total, n FROM wo_sums", "SELECT grp, sum(v), count(*) FROM wo_items GROUP BY grp")
	e.assertIdentical("SELECT id, t_id, label, v FROM wo_labeled", "SELECT i.id, t.id, t.label, i.v FROM wo_items i LEFT JOIN wo_tags t ON t.id = i.grp")
	e.assertIdentical("SELECT grp, id, v, part FROM wo_win", "SELECT grp, id, v, sum(v) OVER (PARTITION BY grp) FROM wo_items")

	after := e.locations("wo_sums", "grp")
	require.Equal(t, sums["1"], after["1"], "group 1's aggregates did not change: its row is not rewritten")
	require.Equal(t, sums["<nil>"], after["<nil>"], "the NULL group's aggregates did not change: its row is not rewritten")
	require.NotEqual(t, sums["2"], after["2"], "group 2 changed")
	require.NotContains(t, after, "3", "group 3 has no rows left")
	require.Contains(t, after, "5", "group 5 is new")

	afterL := e.locations("wo_labeled", "ARRAY[id, t_id]")
	for _, k := range []string{"{9,1}", "{4,NULL}", "{6,2}", "{8,NULL}"} {
		require.Equal(t, labeled[k], afterL[k], "joined row %s did not change: it is not rewritten", k)
	}
	for _, k := range []string{"{1,1}", "{5,1}", "{2,2}"} {
		require.NotEqual(t, labeled[k], afterL[k], "row %s's v changed", k)
	}
	require.Contains(t, afterL, "{3,2}", "row 3 joins tag 2 now")
	require.NotContains(t, afterL, "{3,NULL}", "row 3 has a tag now")
	require.NotContains(t, afterL, "{7,NULL}", "row 7 was deleted")

	afterW := e.locations("wo_win", "ARRAY[grp, id]")
	for _, k := range []string{"{1,9}", "{NULL,4}", "{NULL,8}"} {
		require.Equal(t, win[k], afterW[k], "window row %s did not change: it is not rewritten", k)
	}
	require.NotEqual(t, win["{1,1}"], afterW["{1,1}"], "row 1's v changed")
	require.NotEqual(t, win["{2,6}"], afterW["{2,6}"], "group 2's sum changed")

	// A page without a NULL group: group 2 goes, group 1 stays as it was.
	e.exec(`DELETE FROM wo_items WHERE grp = 2`)
	e.exec(`UPDATE wo_items SET note = 'y' WHERE grp = 1`)
	e.converge(c)
	e.assertIdentical("SELECT grp, total, n FROM wo_sums", "SELECT grp, sum(v), count(*) FROM wo_items GROUP BY grp")
	last := e.locations("wo_sums", "grp")
	require.NotContains(t, last, "2", "group 2 has no rows left")
	require.Equal(t, sums["1"], last["1"], "group 1's aggregates did not change: its row is not rewritten")

	requireConsistent(t, "wo_sums", e.selfCheck(c, "wo_sums", trellis.SelfCheckStandard))
	requireConsistent(t, "wo_labeled", e.selfCheck(c, "wo_labeled", trellis.SelfCheckStandard))
}
