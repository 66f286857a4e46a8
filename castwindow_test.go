package trellis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// The owner of a source's key type (an enum of another role's) creates
// casts between it and text, each recording who ran it, once the
// transforms are live and while only a drain runs (no staging pass ever
// looks for the casts, the widest form of the window between a cast's
// creation and the pass that pauses its readers). Writes keep flowing
// through keys of every kind the plan renders: a one-column enum key, an
// enum in a key of two columns, an enum grouped on and captured, an enum
// joined on, and a key whose row fails a column (its page is diagnosed
// key by key). The drain must never run either cast (with its own role's
// rights or any other), and every target must stay exact.
func TestDrainNeverRunsACastPlantedOnAKeyType(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`)
	planter := e.role("planter")
	e.as(planter,
		`CREATE TYPE public.mood AS ENUM ('low', 'mid', 'high')`,
		`CREATE TABLE public.hits (who text, what text)`,
		`GRANT INSERT ON public.hits TO PUBLIC`,
		// A sequence counts the runs a rollback undoes in hits (a key
		// diagnosed in a subtransaction).
		`CREATE SEQUENCE public.cast_runs`,
		`GRANT USAGE ON SEQUENCE public.cast_runs TO PUBLIC`)
	e.exec(`CREATE TABLE one (m public.mood PRIMARY KEY, v int NOT NULL)`)
	e.exec(`CREATE TABLE two (id int, m public.mood, v int NOT NULL, PRIMARY KEY (id, m))`)
	e.exec(`CREATE TABLE facts (id int PRIMARY KEY, m public.mood NOT NULL, v int NOT NULL)`)
	e.exec(`INSERT INTO one VALUES ('low', 1), ('mid', 2), ('high', 3)`)
	e.exec(`INSERT INTO two SELECT i, m, i FROM generate_series(1, 20) i, unnest(enum_range(NULL::public.mood)) m`)
	e.exec(`INSERT INTO facts SELECT i, (enum_range(NULL::public.mood))[1 + i % 3], i FROM generate_series(1, 60) i`)
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE, DELETE ON one, two, facts TO %s")

	defs := map[string]string{
		"by_one": "SELECT m, v * 2 AS w FROM one",
		"by_two": "SELECT id, m, v + 1 AS w FROM two",
		"by_m":   "SELECT m, sum(v) AS s, count(*) AS n FROM facts GROUP BY m",
		"joined": "SELECT f.id, o.m AS o_m, f.v, o.v AS ov FROM facts f JOIN one o ON o.m = f.m",
	}
	builder := e.engine()
	for _, d := range []string{
		"TRANSFORM by_one FROM one SELECT m AS m, v * 2 AS w",
		"TRANSFORM by_two FROM two SELECT id AS id, m AS m, v + 1 AS w",
		"TRANSFORM by_m FROM facts SELECT m AS m, sum(v) AS s, count(*) AS n GROUP BY m",
		"TRANSFORM joined FROM facts f JOIN one o ON o.m = f.m SELECT f.id AS id, f.v AS v, o.v AS ov",
		"TRANSFORM ratio FROM two SELECT id AS id, m AS m, 100 / v AS r",
	} {
		_, err := builder.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	for target := range defs {
		e.waitState(builder, target, trellis.StateLive)
	}
	e.waitState(builder, "ratio", trellis.StateLive)
	require.NoError(t, builder.Close())
	drain := e.connect(trellis.Options{DrainWorkers: 2})

	hit := func(what string) string {
		return fmt.Sprintf(`PERFORM pg_catalog.nextval('public.cast_runs'); INSERT INTO public.hits VALUES (current_user, '%s')`, what)
	}
	e.as(planter,
		`CREATE FUNCTION public.mood_from(text) RETURNS public.mood LANGUAGE plpgsql AS $$
BEGIN `+hit("text->mood")+`;
RETURN (SELECT x FROM pg_catalog.unnest(pg_catalog.enum_range(NULL::public.mood)) x WHERE pg_catalog.textin(pg_catalog.enum_out(x)) OPERATOR(pg_catalog.=) $1); END $$`,
		`CREATE FUNCTION public.mood_text(public.mood) RETURNS text LANGUAGE plpgsql AS $$
BEGIN `+hit("mood->text")+`; RETURN pg_catalog.textin(pg_catalog.enum_out($1)); END $$`,
		`CREATE CAST (text AS public.mood) WITH FUNCTION public.mood_from(text)`,
		`CREATE CAST (public.mood AS text) WITH FUNCTION public.mood_text(public.mood)`)

	for round := 0; round < 3; round++ {
		e.as(writer,
			`UPDATE one SET v = v + 1`,
			`UPDATE two SET v = v + 1 WHERE id % 3 = 0`,
			fmt.Sprintf(`DELETE FROM two WHERE id = %d AND m = 'mid'`, 20-round),
			fmt.Sprintf(`INSERT INTO two VALUES (%d, 'high', 7)`, 100+round),
			fmt.Sprintf(`UPDATE facts SET m = 'high' WHERE id %% 7 = %d`, round),
			`UPDATE facts SET v = v + 1 WHERE m = 'low'`)
		e.as(writer, `DELETE FROM one WHERE m = 'mid'`)
		e.as(writer, `INSERT INTO one VALUES ('mid', 10)`)
	}
	// A row on which a column fails: its page is diagnosed key by key.
	e.as(writer, `UPDATE two SET v = 0 WHERE id = 4 AND m = 'low'`)
	e.converge(drain)
	q := e.waitQuarantine(drain, "ratio.r", func(q trellis.QuarantineEntry) bool { return q.Rows == 1 })
	require.Contains(t, q.Error, "division by zero")
	for target, recompute := range defs {
		e.assertMatches(target, recompute)
	}
	require.Empty(t, e.rows(`SELECT who, what, count(*) FROM public.hits GROUP BY who, what ORDER BY 1, 2`),
		"a cast planted on the key type ran")
	require.Equal(t, [][]string{{"false"}}, e.rows(`SELECT is_called FROM public.cast_runs`),
		"a cast planted on the key type ran in a subtransaction rolled back since")
}

// As TestDrainNeverRunsACastPlantedOnAKeyType, for keys and captured
// columns whose type is an array of a type of another role's: a key of
// an array of an enum, a key of an array of a composite type, and an
// array of a domain grouped on, joined on and captured. Their owner
// creates casts between each array type and text (the array type is
// the element type owner's, so the owner may), each recording who ran
// it, once the transforms are live and while only a drain runs. A row of
// each array-keyed table fails a column, so its page is diagnosed key by
// key. The drain must never run a cast, and every target must stay
// exact.
func TestDrainNeverRunsACastPlantedOnAnArrayKeyType(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`)
	planter := e.role("planter")
	e.as(planter,
		`CREATE TYPE public.mood AS ENUM ('low', 'mid', 'high')`,
		`CREATE TYPE public.pair AS (a int, b text)`,
		`CREATE DOMAIN public.posint AS int CHECK (VALUE > 0)`,
		`CREATE TABLE public.hits (who text, what text)`,
		`GRANT INSERT ON public.hits TO PUBLIC`,
		`CREATE SEQUENCE public.cast_runs`,
		`GRANT USAGE ON SEQUENCE public.cast_runs TO PUBLIC`)
	e.exec(`CREATE TABLE arr (m public.mood[] PRIMARY KEY, v int NOT NULL)`)
	e.exec(`CREATE TABLE pairs (p public.pair[] PRIMARY KEY, v int NOT NULL)`)
	e.exec(`CREATE TABLE tagged (id int PRIMARY KEY, tags public.posint[] NOT NULL, v int NOT NULL)`)
	e.exec(`CREATE TABLE tagnames (id int PRIMARY KEY, tags public.posint[] NOT NULL, v int NOT NULL)`)
	e.exec(`CREATE INDEX ON tagged (tags)`)
	e.exec(`CREATE INDEX ON tagnames (tags)`)
	e.exec(`INSERT INTO arr VALUES ('{low}', 1), ('{low,mid}', 2), ('{high,low}', 3), ('{}', 4), ('[0:1]={mid,mid}', 5), ('{{low,mid},{high,high}}', 6)`)
	e.exec(`INSERT INTO pairs SELECT ARRAY[ROW(i, 'a,"b}' || i)::public.pair, ROW(i + 1, NULL)::public.pair], i FROM generate_series(1, 20) i`)
	e.exec(`INSERT INTO tagged SELECT i, ARRAY[1 + i % 4, 1 + i % 3]::public.posint[], i FROM generate_series(1, 60) i`)
	e.exec(`INSERT INTO tagnames SELECT i, ARRAY[1 + i % 4, 1 + i % 3]::public.posint[], i FROM generate_series(1, 12) i`)
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE, DELETE ON arr, pairs, tagged, tagnames TO %s")

	defs := map[string]string{
		"by_arr":    "SELECT m, v * 2 AS w FROM arr",
		"by_pairs":  "SELECT p, v + 1 AS w FROM pairs",
		"by_tags":   "SELECT tags, sum(v) AS s, count(*) AS n FROM tagged GROUP BY tags",
		"tags_join": "SELECT f.id, n.id AS n_id, f.v, n.v AS nv FROM tagged f JOIN tagnames n ON n.tags = f.tags",
	}
	builder := e.engine()
	for _, d := range []string{
		"TRANSFORM by_arr FROM arr SELECT m AS m, v * 2 AS w",
		"TRANSFORM by_pairs FROM pairs SELECT p AS p, v + 1 AS w",
		"TRANSFORM by_tags FROM tagged SELECT tags AS tags, sum(v) AS s, count(*) AS n GROUP BY tags",
		"TRANSFORM tags_join FROM tagged f JOIN tagnames n ON n.tags = f.tags SELECT f.id AS id, n.id AS n_id, f.v AS v, n.v AS nv",
		"TRANSFORM arr_ratio FROM arr SELECT m AS m, 100 / v AS r",
		"TRANSFORM pairs_ratio FROM pairs SELECT p AS p, 100 / v AS r",
	} {
		_, err := builder.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	for _, target := range []string{"by_arr", "by_pairs", "by_tags", "tags_join", "arr_ratio", "pairs_ratio"} {
		e.waitState(builder, target, trellis.StateLive)
	}
	require.NoError(t, builder.Close())
	drain := e.connect(trellis.Options{DrainWorkers: 2})

	hit := func(what string) string {
		return fmt.Sprintf(`PERFORM pg_catalog.nextval('public.cast_runs'); INSERT INTO public.hits VALUES (current_user, '%s')`, what)
	}
	// Each planted cast returns the right value (read by the array type's
	// input function), so a run shows only in hits.
	for _, typ := range []string{"mood", "pair", "posint"} {
		e.as(planter,
			fmt.Sprintf(`CREATE FUNCTION public.%[1]s_arr_from(text) RETURNS public.%[1]s[] LANGUAGE plpgsql AS $$
BEGIN %[2]s;
RETURN (SELECT r.v FROM pg_catalog.json_to_record(pg_catalog.json_build_object('v', $1)) AS r(v public.%[1]s[])); END $$`, typ, hit("text->"+typ+"[]")),
			fmt.Sprintf(`CREATE FUNCTION public.%[1]s_arr_text(public.%[1]s[]) RETURNS text LANGUAGE plpgsql AS $$
BEGIN %[2]s; RETURN pg_catalog.format('%%s', $1); END $$`, typ, hit(typ+"[]->text")),
			fmt.Sprintf(`CREATE CAST (text AS public.%[1]s[]) WITH FUNCTION public.%[1]s_arr_from(text)`, typ),
			fmt.Sprintf(`CREATE CAST (public.%[1]s[] AS text) WITH FUNCTION public.%[1]s_arr_text(public.%[1]s[])`, typ))
	}

	for round := 0; round < 3; round++ {
		e.as(writer,
			`UPDATE arr SET v = v + 1`,
			fmt.Sprintf(`INSERT INTO arr VALUES (ARRAY['mid', 'high', 'low', 'mid']::public.mood[] || '{}'::public.mood[], %d) ON CONFLICT (m) DO UPDATE SET v = arr.v + 1`, 7+round),
			`DELETE FROM arr WHERE m = '{low,mid}'`,
			`INSERT INTO arr VALUES ('{low,mid}', 20) ON CONFLICT (m) DO NOTHING`,
			`UPDATE pairs SET v = v + 1 WHERE v % 3 = 0`,
			fmt.Sprintf(`DELETE FROM pairs WHERE v = %d`, 20-round),
			fmt.Sprintf(`INSERT INTO pairs VALUES (ARRAY[ROW(%d, 'x\y')::public.pair], 7)`, 100+round),
			fmt.Sprintf(`UPDATE tagged SET tags = '{4,4}' WHERE id %% 7 = %d`, round),
			`UPDATE tagged SET v = v + 1 WHERE tags = '{1,1}'`,
			fmt.Sprintf(`UPDATE tagnames SET tags = tags || 2::public.posint WHERE id = %d`, 1+round),
			`UPDATE tagnames SET v = v + 1`)
	}
	// Rows on which a column fails: their pages are diagnosed key by key.
	e.as(writer, `UPDATE arr SET v = 0 WHERE m = '{high,low}'`)
	e.as(writer, `UPDATE pairs SET v = 0 WHERE (p[1]).a = 5`)
	e.converge(drain)
	for _, target := range []string{"arr_ratio.r", "pairs_ratio.r"} {
		q := e.waitQuarantine(drain, target, func(q trellis.QuarantineEntry) bool { return q.Rows == 1 })
		require.Contains(t, q.Error, "division by zero", target)
	}
	for target, recompute := range defs {
		e.assertMatches(target, recompute)
		// The self-check reads the same keys back as parameters.
		requireConsistent(t, target, e.selfCheck(drain, target, trellis.SelfCheckStrict))
	}
	require.Empty(t, e.rows(`SELECT who, what, count(*) FROM public.hits GROUP BY who, what ORDER BY 1, 2`),
		"a cast planted on an array key type ran")
	require.Equal(t, [][]string{{"false"}}, e.rows(`SELECT is_called FROM public.cast_runs`),
		"a cast planted on an array key type ran in a subtransaction rolled back since")
}

// A page of a transform in its initial build is recomputed only up to
// the build's cursor, which its statements take as parameters of the
// key's types; a page that fails is diagnosed key by key, cursor
// included. With a key of an array of another role's enum, the casts
// that role plants on the array type must not run there either. The
// build is held after its first page (a trigger on the target refuses
// the rows past it, as something no row explains), only a drain runs.
func TestBuildCursorNeverRunsACastPlantedOnAnArrayKeyType(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`)
	planter := e.role("planter")
	e.as(planter,
		`CREATE TYPE public.mood AS ENUM ('low', 'mid', 'high')`,
		`CREATE SEQUENCE public.cast_runs`,
		`GRANT USAGE ON SEQUENCE public.cast_runs TO PUBLIC`)
	// Partitioned, so that it is built in pages.
	e.exec(`CREATE TABLE big (id int, m public.mood[], v int NOT NULL, PRIMARY KEY (id, m)) PARTITION BY RANGE (id)`)
	e.exec(`CREATE TABLE big_1 PARTITION OF big FOR VALUES FROM (MINVALUE) TO (40001)`)
	e.exec(`CREATE TABLE big_2 PARTITION OF big FOR VALUES FROM (40001) TO (MAXVALUE)`)
	e.exec(`INSERT INTO big SELECT g, ARRAY[(enum_range(NULL::public.mood))[1 + g % 3], 'low'], g FROM generate_series(1, 80000) g`)
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	_, err := m.Define(e.ctx, "TRANSFORM big_ratio FROM big SELECT 100 / v AS r")
	require.NoError(t, err)
	e.exec(`CREATE FUNCTION hold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'held' USING ERRCODE = '55000'; END $$`)
	e.exec(`CREATE TRIGGER hold BEFORE INSERT ON big_ratio FOR EACH ROW WHEN (NEW.id > 60000) EXECUTE FUNCTION hold()`)
	builder := e.connect(trellis.Options{Staging: true, DrainWorkers: 1})
	e.pollStatus(builder, "big_ratio", stateWaitCap, 10*time.Millisecond, "the build did not stop at its hold",
		func(st *trellis.Status) bool { return st.BackfillFailure != nil })
	require.NoError(t, builder.Close())
	st := e.rows(`SELECT state, build_cursor IS NOT NULL FROM trellis.transforms`)[0]
	require.Equal(t, []string{"backfilling", "true"}, st, "the build stopped past its first page")

	hit := `PERFORM pg_catalog.nextval('public.cast_runs')`
	e.as(planter,
		`CREATE FUNCTION public.moods_from(text) RETURNS public.mood[] LANGUAGE plpgsql AS $$
BEGIN `+hit+`;
RETURN (SELECT r.v FROM pg_catalog.json_to_record(pg_catalog.json_build_object('v', $1)) AS r(v public.mood[])); END $$`,
		`CREATE FUNCTION public.moods_text(public.mood[]) RETURNS text LANGUAGE plpgsql AS $$
BEGIN `+hit+`; RETURN pg_catalog.format('%s', $1); END $$`,
		`CREATE CAST (text AS public.mood[]) WITH FUNCTION public.moods_from(text)`,
		`CREATE CAST (public.mood[] AS text) WITH FUNCTION public.moods_text(public.mood[])`)
	drain := e.connect(trellis.Options{DrainWorkers: 1})
	// Rows the build wrote (up to its cursor), and the row at the cursor
	// (where the comparison with the cursor reads its array), which now
	// fails.
	e.exec(`UPDATE big SET v = v + 1 WHERE id % 1000 = 0 AND id <= 40000`)
	e.exec(`UPDATE big SET v = 0 WHERE id = (SELECT build_cursor[1]::int FROM trellis.transforms)`)
	q := e.waitQuarantine(drain, "big_ratio.r", func(q trellis.QuarantineEntry) bool { return q.Rows == 1 })
	require.Contains(t, q.Error, "division by zero")
	require.Equal(t, [][]string{{"false"}}, e.rows(`SELECT is_called FROM public.cast_runs`),
		"a cast planted on an array key type ran")
}

// A domain of another role's over citext (whose = is the extension's,
// outside pg_catalog): its groups and keys are compared as citext, and
// the domain's owner owns its array type, so may create casts between
// that and citext[] or text. Grouped and keyed on it, with a NULL group
// and a row that fails a column, the drain must run none of them.
func TestDrainNeverRunsACastPlantedOnADomainOverCitext(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var avail bool
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'citext')`).Scan(&avail))
	if !avail {
		t.Skip("the citext extension is not installed on this server (Debian: postgresql-contrib)")
	}
	e.exec(`CREATE SCHEMA ext`)
	e.exec(`CREATE EXTENSION citext SCHEMA ext`)
	e.exec(`GRANT USAGE ON SCHEMA ext TO PUBLIC`)
	e.exec(`GRANT CREATE ON SCHEMA public TO PUBLIC`)
	planter := e.role("planter")
	e.as(planter,
		`CREATE DOMAIN public.email AS ext.citext`,
		`CREATE TABLE public.hits (who text, what text)`,
		`GRANT INSERT ON public.hits TO PUBLIC`,
		`CREATE SEQUENCE public.cast_runs`,
		`GRANT USAGE ON SEQUENCE public.cast_runs TO PUBLIC`)
	e.exec(`CREATE TABLE mail (id int PRIMARY KEY, addr public.email, v int NOT NULL)`)
	e.exec(`CREATE INDEX ON mail (addr)`)
	e.exec(`CREATE TABLE boxes (addr public.email PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO mail SELECT i, CASE WHEN i % 5 = 0 THEN 'A' || (i % 4) ELSE 'a' || (i % 4) END, i FROM generate_series(1, 40) i`)
	e.exec(`INSERT INTO boxes SELECT 'box' || i, i FROM generate_series(1, 20) i`)
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE, DELETE ON mail, boxes TO %s")
	defs := map[string]string{
		"by_addr":  "SELECT addr::text, sum(v) AS s, count(*) AS n FROM mail GROUP BY addr",
		"boxes_of": "SELECT addr::text, v + 1 AS w FROM boxes",
	}
	builder := e.engine()
	for _, d := range []string{
		"TRANSFORM by_addr FROM mail SELECT addr AS addr, sum(v) AS s, count(*) AS n GROUP BY addr",
		"TRANSFORM boxes_of FROM boxes SELECT addr AS addr, v + 1 AS w",
		"TRANSFORM boxes_ratio FROM boxes SELECT addr AS addr, 100 / v AS r",
	} {
		_, err := builder.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	for _, target := range []string{"by_addr", "boxes_of", "boxes_ratio"} {
		e.waitState(builder, target, trellis.StateLive)
	}
	require.NoError(t, builder.Close())
	drain := e.connect(trellis.Options{DrainWorkers: 2})

	hit := func(what string) string {
		return fmt.Sprintf(`PERFORM pg_catalog.nextval('public.cast_runs'); INSERT INTO public.hits VALUES (current_user, '%s')`, what)
	}
	e.as(planter,
		`CREATE FUNCTION public.emails_citext(public.email[]) RETURNS ext.citext[] LANGUAGE plpgsql AS $$
BEGIN `+hit("email[]->citext[]")+`; RETURN (SELECT pg_catalog.array_agg(x::ext.citext) FROM pg_catalog.unnest($1) x); END $$`,
		`CREATE FUNCTION public.citext_emails(ext.citext[]) RETURNS public.email[] LANGUAGE plpgsql AS $$
BEGIN `+hit("citext[]->email[]")+`; RETURN (SELECT pg_catalog.array_agg(x::public.email) FROM pg_catalog.unnest($1) x); END $$`,
		`CREATE FUNCTION public.emails_from(text) RETURNS public.email[] LANGUAGE plpgsql AS $$
BEGIN `+hit("text->email[]")+`;
RETURN (SELECT r.v FROM pg_catalog.json_to_record(pg_catalog.json_build_object('v', $1)) AS r(v public.email[])); END $$`,
		`CREATE CAST (public.email[] AS ext.citext[]) WITH FUNCTION public.emails_citext(public.email[])`,
		`CREATE CAST (ext.citext[] AS public.email[]) WITH FUNCTION public.citext_emails(ext.citext[])`,
		`CREATE CAST (text AS public.email[]) WITH FUNCTION public.emails_from(text)`)

	for round := 0; round < 3; round++ {
		e.as(writer,
			fmt.Sprintf(`UPDATE mail SET v = v + 1 WHERE id %% 3 = %d`, round),
			fmt.Sprintf(`UPDATE mail SET addr = 'B%d' WHERE id = %d`, round, 10+round),
			fmt.Sprintf(`UPDATE mail SET addr = NULL WHERE id = %d`, 20+round),
			`UPDATE boxes SET v = v + 1`,
			fmt.Sprintf(`DELETE FROM boxes WHERE addr = 'BOX%d'`, 1+round),
			fmt.Sprintf(`INSERT INTO boxes VALUES ('new%d', 3)`, round))
	}
	e.as(writer, `UPDATE boxes SET v = 0 WHERE addr = 'box7'`)
	e.converge(drain)
	q := e.waitQuarantine(drain, "boxes_ratio.r", func(q trellis.QuarantineEntry) bool { return q.Rows == 1 })
	require.Contains(t, q.Error, "division by zero")
	for target, recompute := range defs {
		e.assertMatches("(SELECT addr::text, "+map[string]string{"by_addr": "s, n", "boxes_of": "w"}[target]+" FROM "+target+") x", recompute)
	}
	require.Empty(t, e.rows(`SELECT who, what, count(*) FROM public.hits GROUP BY who, what ORDER BY 1, 2`),
		"a cast planted on the domain's array type ran")
	require.Equal(t, [][]string{{"false"}}, e.rows(`SELECT is_called FROM public.cast_runs`),
		"a cast planted on the domain's array type ran in a subtransaction rolled back since")
}
