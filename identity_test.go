package trellis_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// identityCase is a column type and two values that are equal (or have no
// equality at all) but are not the same value: what the target must
// follow when the source changes from one to the other.
type identityCase struct{ typ, old, new string }

// identityCases cover numeric scales, signed zeros, nondeterministic
// collations, intervals, and types without an = operator (json, xml,
// point) or whose = is not identity (box compares areas, arrays ignore
// element scale, composites compare fields by their =).
var identityCases = []identityCase{
	{"numeric", "10.5", "10.50"},
	{"double precision", "0", "-0"},
	{"real", "0", "-0"},
	{"double precision", "NaN", "NaN"},
	{"text COLLATE ci", "alice", "Alice"},
	{"varchar(10) COLLATE ci", "Bob", "BOB"},
	{"interval", "1 day", "24 hours"},
	{"json", `{"a":1}`, `{"a": 1}`},
	{"json", `[1, 2]`, `[1, 3]`},
	{"jsonb", `{"a": 1.0}`, `{"a": 1.00}`},
	{"xml", "<a/>", "<a></a>"},
	{"point", "(1,2)", "(1,3)"},
	{"box", "(1,1),(0,0)", "(2,2),(1,1)"},
	{"integer[]", "{1,2}", "[0:1]={1,2}"},
	{"numeric[]", "{1.0}", "{1.00}"},
	{"json[]", `{"{\"a\":1}"}`, `{"{\"a\": 1}"}`},
	{"pair", "(1.0,x)", "(1.00,x)"},
	{"amount", "3.1", "3.10"},
	{"money", "1", "1"},
	{"timestamptz", "2026-01-01 00:00:00+00", "2026-01-01 01:00:00+01"},
}

// identitySchema creates the collation and types the cases use.
func (e *env) identitySchema() {
	e.t.Helper()
	e.exec(`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
	e.exec(`CREATE TYPE pair AS (n numeric, s text)`)
	e.exec(`CREATE DOMAIN amount AS numeric CHECK (VALUE >= 0)`)
}

// assertIdentical checks that two queries return the same rows, compared
// by their text forms (identity, not equality), both ways.
func (e *env) assertIdentical(target, recompute string) {
	e.t.Helper()
	diff := func(a, b string) [][]string {
		return e.rows(fmt.Sprintf(`(SELECT x::text COLLATE "C" FROM (%s) x) EXCEPT ALL (SELECT y::text COLLATE "C" FROM (%s) y) ORDER BY 1 LIMIT 10`, a, b))
	}
	lacks, has := diff(recompute, target), diff(target, recompute)
	if len(lacks) > 0 || len(has) > 0 {
		e.t.Fatalf("target differs from a fresh recompute by identity:\n  lacks %v\n  has extra %v", lacks, has)
	}
}

// A projection follows every change of a value to one that is equal but
// not identical, and of a key to an equal key, and the self-check
// compares for identity too.
func TestProjectionKeepsIdenticalValues(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.identitySchema()
	var cols, sel, recompute []string
	for i, c := range identityCases {
		cols = append(cols, fmt.Sprintf("c%d %s", i, c.typ))
		sel = append(sel, fmt.Sprintf("c%d AS c%d", i, i))
		recompute = append(recompute, fmt.Sprintf("c%d", i))
	}
	e.exec(fmt.Sprintf(`CREATE TABLE vals (id int PRIMARY KEY, %s)`, strings.Join(cols, ", ")))
	for i, c := range identityCases {
		e.exec(fmt.Sprintf(`INSERT INTO vals (id, c%d) VALUES ($1, $2::text::%s)`, i, strings.Split(c.typ, " COLLATE")[0]), i, c.old)
	}
	e.exec(`CREATE TABLE nk (id numeric PRIMARY KEY, label text)`)
	e.exec(`INSERT INTO nk VALUES (2, 'two'), (3.0, 'three')`)
	e.exec(`CREATE TABLE ck (id text COLLATE ci PRIMARY KEY, n int)`)
	e.exec(`INSERT INTO ck VALUES ('alice', 1), ('bob', 2)`)
	c := e.engine()
	_, err := c.Define(e.ctx, "TRANSFORM vals_t FROM vals SELECT "+strings.Join(sel, ", "))
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM nk_t FROM nk SELECT label AS label")
	require.NoError(t, err)
	_, err = c.Define(e.ctx, "TRANSFORM ck_t FROM ck SELECT n AS n")
	require.NoError(t, err)
	e.waitState(c, "ck_t", trellis.StateLive)
	e.waitState(c, "vals_t", trellis.StateLive)
	e.waitState(c, "nk_t", trellis.StateLive)
	valsRecompute := "SELECT id, " + strings.Join(recompute, ", ") + " FROM vals"
	valsTarget := "SELECT id, " + strings.Join(recompute, ", ") + " FROM vals_t"
	e.assertIdentical(valsTarget, valsRecompute)

	for i, c := range identityCases {
		e.exec(fmt.Sprintf(`UPDATE vals SET c%d = $1::text::%s WHERE id = $2`, i, strings.Split(c.typ, " COLLATE")[0]), c.new, i)
	}
	e.exec(`UPDATE nk SET id = 2.000 WHERE id = 2`)
	e.exec(`UPDATE nk SET id = 3 WHERE id = 3`)
	e.exec(`UPDATE ck SET id = 'Alice' WHERE id = 'alice'`)
	e.converge(c)
	e.assertIdentical(valsTarget, valsRecompute)
	e.assertIdentical("SELECT id, label FROM nk_t", "SELECT id, label FROM nk")
	require.Equal(t, [][]string{{"2.000"}, {"3"}}, e.rows(`SELECT id::text FROM nk_t ORDER BY id`))
	e.assertIdentical("SELECT id, n FROM ck_t", "SELECT id, n FROM ck")
	e.exec(`UPDATE vals SET c0 = NULL WHERE id = 0`)
	e.exec(`UPDATE vals SET c0 = 1 WHERE id = 1`)
	e.converge(c)
	e.assertIdentical(valsTarget, valsRecompute)

	requireConsistent(t, "vals_t", e.selfCheck(c, "vals_t", trellis.SelfCheckStandard))
	requireConsistent(t, "nk_t", e.selfCheck(c, "nk_t", trellis.SelfCheckStandard))
	// Changed outside Trellis to equal values: the check sees them.
	e.exec(`UPDATE vals_t SET c0 = 1.0 WHERE id = 1`)
	e.exec(`UPDATE vals_t SET c7 = '{"a":1}' WHERE id = 7`)
	e.exec(`UPDATE nk_t SET id = 2 WHERE id = 2`)
	rep := e.selfCheck(c, "vals_t", trellis.SelfCheckStandard)
	require.Equal(t, trellis.SelfCheckDiverged, rep.Outcome, "%+v", rep)
	require.EqualValues(t, 2, rep.Differing, "%+v", rep)
	var differing []string
	for _, d := range rep.Divergences {
		differing = append(differing, d.Columns...)
	}
	require.ElementsMatch(t, []string{"c0", "c7"}, differing)
	rep = e.selfCheck(c, "nk_t", trellis.SelfCheckStandard)
	require.Equal(t, trellis.SelfCheckDiverged, rep.Outcome, "%+v", rep)
}

// Joins and aggregates work over every storable type as a value, and
// over every type with equality as a GROUP BY key: json and xml values,
// json aggregates, array keys (an array of keys must not be flattened),
// and keys that change to equal but not identical values.
func TestShapesOverTypesWithoutEquality(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.identitySchema()
	e.exec(`CREATE TABLE owners (id int PRIMARY KEY, meta json, doc xml)`)
	e.exec(`CREATE TABLE docs (id int PRIMARY KEY, owner int, grp text, tags int[], amount numeric, who text COLLATE ci, body json, spot point)`)
	e.exec(`INSERT INTO owners VALUES (1, '{"o":1}', '<o/>'), (2, '[2]', '<p/>')`)
	e.exec(`INSERT INTO docs SELECT g, g % 3, 'g' || g % 4, ARRAY[g % 2, g % 3], g % 5, CASE WHEN g % 2 = 0 THEN 'alice' ELSE 'bob' END, json_build_object('n', g), point(g, g) FROM generate_series(1, 40) g`)
	e.exec(`INSERT INTO docs VALUES (100, 1, 'solo', '{}', 20, 'carol', '1', '(0,0)'), (101, 1, 'solo', NULL, 70.0, 'dave', 'null', NULL)`)
	e.exec(`CREATE INDEX ON docs (owner)`)
	e.exec(`CREATE INDEX ON docs (grp)`)
	e.exec(`CREATE INDEX ON docs (tags)`)
	e.exec(`CREATE INDEX ON docs (amount)`)
	e.exec(`CREATE INDEX ON docs (who)`)
	c := e.engine()
	shapes := []struct{ stmt, target, recompute string }{
		{"TRANSFORM bodies FROM docs SELECT grp AS grp, json_agg(body ORDER BY id) AS bodies, jsonb_agg(body ORDER BY id) AS jbodies, count(*) AS n GROUP BY grp",
			"SELECT grp, bodies, jbodies, n FROM bodies",
			"SELECT grp, json_agg(body ORDER BY id), jsonb_agg(body ORDER BY id), count(*) FROM docs GROUP BY grp"},
		{"TRANSFORM by_tags FROM docs SELECT tags AS tags, count(*) AS n, array_agg(id ORDER BY id) AS ids GROUP BY tags",
			"SELECT tags, n, ids FROM by_tags",
			"SELECT tags, count(*), array_agg(id ORDER BY id) FROM docs GROUP BY tags"},
		{"TRANSFORM by_amount FROM docs SELECT amount AS amount, count(*) AS n GROUP BY amount",
			"SELECT amount, n FROM by_amount",
			"SELECT amount, count(*) FROM docs GROUP BY amount"},
		{"TRANSFORM by_who FROM docs SELECT who AS who, count(*) AS n GROUP BY who",
			"SELECT who, n FROM by_who",
			"SELECT who, count(*) FROM docs GROUP BY who"},
		{"TRANSFORM doc_owner FROM docs d JOIN owners o ON o.id = d.owner SELECT d.body AS body, d.spot AS spot, o.meta AS meta, o.doc AS doc",
			"SELECT d_id, o_id, body, spot, meta, doc FROM doc_owner",
			"SELECT d.id, o.id, d.body, d.spot, o.meta, o.doc FROM docs d JOIN owners o ON o.id = d.owner"},
		{"TRANSFORM owner_bodies FROM docs d LEFT JOIN owners o ON o.id = d.owner SELECT d.owner AS owner, json_agg(o.meta ORDER BY d.id) AS metas, xmlagg(o.doc ORDER BY d.id) AS docs GROUP BY d.owner",
			"SELECT owner, metas, docs FROM owner_bodies",
			"SELECT d.owner, json_agg(o.meta ORDER BY d.id), xmlagg(o.doc ORDER BY d.id) FROM docs d LEFT JOIN owners o ON o.id = d.owner GROUP BY d.owner"},
	}
	for _, s := range shapes {
		_, err := c.Define(e.ctx, s.stmt)
		require.NoError(t, err, s.stmt)
	}
	check := func(when string) {
		t.Helper()
		e.converge(c)
		for _, s := range shapes {
			st, err := c.Status(e.ctx, s.target[strings.LastIndex(s.target, " ")+1:])
			require.NoError(t, err)
			require.Equal(t, trellis.StateLive, st.State, "%s %s: %+v", when, s.stmt, st)
			e.assertIdentical(s.target, s.recompute)
		}
	}
	for _, s := range shapes {
		e.waitState(c, s.target[strings.LastIndex(s.target, " ")+1:], trellis.StateLive)
	}
	check("after the build")

	e.exec(`UPDATE docs SET body = '{"n":  1}' WHERE id = 1`)
	e.exec(`UPDATE docs SET tags = ARRAY[9, 9] WHERE id = 2`)
	e.exec(`UPDATE docs SET tags = '{}' WHERE id = 3`)
	e.exec(`UPDATE docs SET tags = NULL WHERE id = 100`)
	e.exec(`UPDATE docs SET amount = 20.000 WHERE id = 100`)
	e.exec(`UPDATE docs SET amount = 70.00 WHERE id = 101`)
	e.exec(`UPDATE docs SET who = 'Carol' WHERE id = 100`)
	e.exec(`UPDATE docs SET spot = '(5,5)' WHERE id = 4`)
	e.exec(`UPDATE owners SET meta = '{"o": 1}', doc = '<o></o>' WHERE id = 1`)
	e.exec(`INSERT INTO docs VALUES (102, 2, 'g1', ARRAY[1, 0], 3, 'erin', '{}', '(1,1)')`)
	e.exec(`DELETE FROM docs WHERE id = 5`)
	check("after the changes")

	for _, s := range shapes {
		name := s.target[strings.LastIndex(s.target, " ")+1:]
		requireConsistent(t, name, e.selfCheck(c, name, trellis.SelfCheckStandard))
	}
}

// keyable tells the identity cases whose type PostgreSQL can group by.
func keyable(typ string) bool {
	switch strings.Fields(typ)[0] {
	case "json", "xml", "point", "box", "json[]":
		return false
	}
	return true
}

// Generated: every identity case as a joined value, inside an aggregate,
// and (where the type has equality) as a GROUP BY key, changed from its
// old value to its new one; every target must then be identical to its
// recompute.
func TestIdentityCasesAcrossShapes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.identitySchema()
	var cols, joinSel, joinRe, aggSel, aggRe []string
	for i, c := range identityCases {
		cols = append(cols, fmt.Sprintf("c%d %s", i, c.typ))
		joinSel = append(joinSel, fmt.Sprintf("v.c%d AS c%d", i, i))
		joinRe = append(joinRe, fmt.Sprintf("v.c%d", i))
		aggSel = append(aggSel, fmt.Sprintf("array_agg(c%d ORDER BY id) FILTER (WHERE c%d IS NOT NULL) AS c%d", i, i, i))
		aggRe = append(aggRe, fmt.Sprintf("array_agg(c%d ORDER BY id) FILTER (WHERE c%d IS NOT NULL)", i, i))
	}
	e.exec(fmt.Sprintf(`CREATE TABLE vals (id int PRIMARY KEY, grp int, %s)`, strings.Join(cols, ", ")))
	e.exec(`CREATE TABLE side (id int PRIMARY KEY, label text)`)
	e.exec(`INSERT INTO side VALUES (0, 'zero'), (1, 'one'), (2, 'two')`)
	e.exec(`CREATE INDEX ON vals (grp)`)
	castOf := func(c identityCase) string { return strings.Split(c.typ, " COLLATE")[0] }
	for i, c := range identityCases {
		e.exec(fmt.Sprintf(`INSERT INTO vals (id, grp, c%d) VALUES ($1, $1 %% 3, $2::text::%s)`, i, castOf(c)), i, c.old)
	}
	type shape struct{ name, stmt, target, recompute string }
	shapes := []shape{
		{"joined", "TRANSFORM joined FROM vals v JOIN side s ON s.id = v.grp SELECT s.label AS label, " + strings.Join(joinSel, ", "),
			"SELECT * FROM joined", "SELECT v.id, s.id, s.label, " + strings.Join(joinRe, ", ") + " FROM vals v JOIN side s ON s.id = v.grp"},
		{"aggregated", "TRANSFORM aggregated FROM vals SELECT grp AS grp, " + strings.Join(aggSel, ", ") + " GROUP BY grp",
			"SELECT * FROM aggregated", "SELECT grp, " + strings.Join(aggRe, ", ") + " FROM vals GROUP BY grp"},
	}
	for i, c := range identityCases {
		if !keyable(c.typ) {
			continue
		}
		e.exec(fmt.Sprintf(`CREATE INDEX ON vals (c%d)`, i))
		n := fmt.Sprintf("by_c%d", i)
		shapes = append(shapes, shape{n, fmt.Sprintf("TRANSFORM %s FROM vals SELECT c%d AS k, count(*) AS n, sum(id) AS ids GROUP BY c%d", n, i, i),
			"SELECT k, n, ids FROM " + n, fmt.Sprintf("SELECT c%d, count(*), sum(id) FROM vals GROUP BY c%d", i, i)})
	}
	c := e.engine()
	for _, s := range shapes {
		_, err := c.Define(e.ctx, s.stmt)
		require.NoError(t, err, s.stmt)
	}
	for _, s := range shapes {
		e.waitState(c, s.name, trellis.StateLive)
		e.assertIdentical(s.target, s.recompute)
	}
	for i, c := range identityCases {
		e.exec(fmt.Sprintf(`UPDATE vals SET c%d = $1::text::%s WHERE id = $2`, i, castOf(c)), c.new, i)
	}
	e.converge(c)
	for _, s := range shapes {
		st, err := c.Status(e.ctx, s.name)
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, "%s: %+v", s.stmt, st)
		e.assertIdentical(s.target, s.recompute)
	}
	for _, s := range shapes[:3] {
		requireConsistent(t, s.name, e.selfCheck(c, s.name, trellis.SelfCheckStandard))
	}
}

// Generated: a source keyed by each type of the identity cases that has
// equality, read by a projection and a join; its key changes to an equal
// but not identical value, and every target must follow.
func TestIdentityOfSourceKeys(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.identitySchema()
	e.exec(`CREATE TABLE side (id int PRIMARY KEY, label text)`)
	e.exec(`INSERT INTO side VALUES (1, 'one'), (2, 'two')`)
	type shape struct{ name, target, recompute string }
	var shapes []shape
	var updates []string
	c := e.engine()
	for i, ic := range identityCases {
		if !keyable(ic.typ) {
			continue
		}
		cast := strings.Split(ic.typ, " COLLATE")[0]
		tbl := fmt.Sprintf("pk%d", i)
		e.exec(fmt.Sprintf(`CREATE TABLE %s (id %s PRIMARY KEY, v int)`, tbl, ic.typ))
		e.exec(fmt.Sprintf(`INSERT INTO %s VALUES ($1::text::%s, 1)`, tbl, cast), ic.old)
		e.exec(fmt.Sprintf(`CREATE INDEX ON %s (v)`, tbl))
		_, err := c.Define(e.ctx, fmt.Sprintf("TRANSFORM %s_p FROM %s SELECT v + 1 AS w", tbl, tbl))
		require.NoError(t, err, ic.typ)
		_, err = c.Define(e.ctx, fmt.Sprintf("TRANSFORM %s_j FROM %s k JOIN side s ON s.id = k.v SELECT k.id AS id, s.label AS label", tbl, tbl))
		require.NoError(t, err, ic.typ)
		shapes = append(shapes,
			shape{tbl + "_p", "SELECT id, w FROM " + tbl + "_p", "SELECT id, v + 1 FROM " + tbl},
			shape{tbl + "_j", "SELECT id, s_id, label FROM " + tbl + "_j", "SELECT k.id, s.id, s.label FROM " + tbl + " k JOIN side s ON s.id = k.v"})
		updates = append(updates, fmt.Sprintf(`UPDATE %s SET id = %s::%s`, tbl, quoteLiteral(ic.new), cast))
	}
	for _, s := range shapes {
		e.waitState(c, s.name, trellis.StateLive)
		e.assertIdentical(s.target, s.recompute)
	}
	for _, u := range updates {
		e.exec(u)
	}
	e.exec(`UPDATE side SET label = 'uno' WHERE id = 1`)
	e.converge(c)
	for _, s := range shapes {
		st, err := c.Status(e.ctx, s.name)
		require.NoError(t, err)
		require.Equal(t, trellis.StateLive, st.State, "%s: %+v", s.name, st)
		e.assertIdentical(s.target, s.recompute)
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
