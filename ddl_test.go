package trellis_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// DDL of every kind on a source, in the owner's transaction between writes,
// then writes of a role that may only INSERT and UPDATE: no statement
// fails. Each transform either stays live and exact (the change is
// followed) or pauses with a reason that names the table or the change;
// after the change is undone, RESUME re-derives it with every write made
// meanwhile.
func TestWritesSurviveEveryDDLInTheirTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ddl    []string // the owner's transaction; src is the table's name after it
		src    string
		writes []string // the writer's, after it
		paused map[string]string
		undo   []string
	}{
		{name: "key retyped", src: "src",
			ddl:    []string{`ALTER TABLE src ALTER COLUMN id TYPE bigint`, `UPDATE src SET v = 8 WHERE id = 2`, `INSERT INTO src VALUES (100, 1, 1)`},
			writes: []string{`UPDATE src SET v = 9`, `INSERT INTO src VALUES (101, 2, 2)`}},
		{name: "columns added with defaults", src: "src",
			ddl:    []string{`ALTER TABLE src ADD COLUMN d int DEFAULT 5`, `ALTER TABLE src ADD COLUMN r float DEFAULT random()`, `UPDATE src SET v = 8 WHERE id = 2`, `INSERT INTO src (id, g, v) VALUES (100, 1, 1)`},
			writes: []string{`UPDATE src SET v = 9`, `INSERT INTO src (id, g, v) VALUES (101, 2, 2)`}},
		{name: "replica identity", src: "src",
			ddl:    []string{`ALTER TABLE src REPLICA IDENTITY FULL`, `UPDATE src SET v = 8 WHERE id = 2`},
			writes: []string{`UPDATE src SET v = 9`}},
		{name: "grouped column retyped", src: "src",
			ddl:    []string{`ALTER TABLE src ALTER COLUMN g TYPE text`, `UPDATE src SET g = '3' WHERE id = 2`},
			writes: []string{`UPDATE src SET v = 9`, `INSERT INTO src VALUES (101, '2', 2)`},
			paused: map[string]string{"by_g": "column g of public.src is text, not integer"},
			undo:   []string{`ALTER TABLE src ALTER COLUMN g TYPE int USING g::int`}},
		{name: "table renamed", src: "src2",
			ddl:    []string{`ALTER TABLE src RENAME TO src2`, `UPDATE src2 SET v = 8 WHERE id = 2`},
			writes: []string{`UPDATE src2 SET v = 9`, `INSERT INTO src2 VALUES (101, 2, 2)`},
			paused: map[string]string{"by_g": "public.src", "proj": "public.src"},
			undo:   []string{`ALTER TABLE src2 RENAME TO src`}},
		{name: "table moved to another schema", src: "elsewhere.src",
			ddl:    []string{`CREATE SCHEMA elsewhere`, `GRANT USAGE ON SCHEMA elsewhere TO PUBLIC`, `ALTER TABLE src SET SCHEMA elsewhere`, `UPDATE elsewhere.src SET v = 8 WHERE id = 2`},
			writes: []string{`UPDATE elsewhere.src SET v = 9`, `INSERT INTO elsewhere.src VALUES (101, 2, 2)`},
			paused: map[string]string{"by_g": "public.src", "proj": "public.src"},
			undo:   []string{`ALTER TABLE elsewhere.src SET SCHEMA public`}},
		{name: "triggers disabled by the owner", src: "src",
			ddl:    []string{`ALTER TABLE src DISABLE TRIGGER ALL`, `UPDATE src SET v = 8 WHERE id = 2`, `ALTER TABLE src ENABLE TRIGGER ALL`},
			writes: []string{`UPDATE src SET v = 9`},
			paused: map[string]string{"by_g": "disabled", "proj": "disabled"}},
		{name: "table dropped", src: "",
			ddl:    []string{`DROP TABLE src`},
			paused: map[string]string{"by_g": "public.src", "proj": "public.src"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.exec(`CREATE TABLE src (id int PRIMARY KEY, g int, v int)`)
			e.exec(`INSERT INTO src SELECT i, i % 5, i FROM generate_series(1, 40) i`)
			writer := e.role("writer", "GRANT INSERT, UPDATE ON src TO %s")
			c := e.engine()
			_, err := c.Define(e.ctx, "TRANSFORM by_g FROM src SELECT g AS g, sum(v) AS s, count(*) AS n GROUP BY g")
			require.NoError(t, err)
			_, err = c.Define(e.ctx, "TRANSFORM proj FROM src SELECT v * 2 AS w")
			require.NoError(t, err)
			e.waitState(c, "by_g", trellis.StateLive)
			e.waitState(c, "proj", trellis.StateLive)
			e.as(writer, `UPDATE src SET v = 3`)

			e.as(e.db, append([]string{`UPDATE src SET v = 7 WHERE id = 1`}, tc.ddl...)...)
			for _, w := range tc.writes {
				e.as(writer, w)
			}
			recompute := func(target, table string) string {
				if target == "by_g" {
					return fmt.Sprintf("SELECT g, sum(v) AS s, count(*) AS n FROM %s GROUP BY g", table)
				}
				return fmt.Sprintf("SELECT id, v * 2 AS w FROM %s", table)
			}
			for _, tg := range []string{"by_g", "proj"} {
				if says, ok := tc.paused[tg]; ok {
					st := e.waitState(c, tg, trellis.StatePaused)
					require.NotNil(t, st.CaptureFailure, tg)
					require.Contains(t, st.PausedReason, says, tg)
					continue
				}
				e.converge(c)
				e.assertMatches(tg, recompute(tg, tc.src))
			}
			if tc.src == "" {
				return
			}
			e.as(e.db, tc.undo...)
			e.as(writer, `UPDATE src SET v = 10`)
			for tg := range tc.paused {
				_, err := c.Apply(e.ctx, "RESUME TRANSFORM "+tg)
				require.NoError(t, err)
			}
			for _, tg := range []string{"by_g", "proj"} {
				e.waitState(c, tg, trellis.StateLive)
			}
			e.as(writer, `INSERT INTO src (id, g, v) VALUES (500, 1, 500)`)
			e.converge(c)
			for _, tg := range []string{"by_g", "proj"} {
				e.assertMatches(tg, recompute(tg, "src"))
			}
		})
	}
}
