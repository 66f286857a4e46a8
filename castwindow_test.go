package trellis_test

import (
	"fmt"
	"testing"

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
