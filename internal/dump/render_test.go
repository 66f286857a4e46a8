package dump

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pg_query "github.com/wasilibs/go-pgquery"

	"github.com/trellis-pg/trellis/internal/catalog"
)

// parsed is what PostgreSQL's parser makes of a rendering: its statements'
// kinds, the relations they write, and every string constant, decoded.
type parsed struct {
	kinds     []string
	relations []string // schema.name, as the parser resolved the quoting
	strings   []string
}

func parse(t *testing.T, sql string) parsed {
	t.Helper()
	js, err := pg_query.ParseToJSON(sql)
	require.NoError(t, err, sql)
	var tree struct {
		Stmts []struct {
			Stmt map[string]any `json:"stmt"`
		} `json:"stmts"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &tree))
	var p parsed
	for _, s := range tree.Stmts {
		for kind, body := range s.Stmt {
			p.kinds = append(p.kinds, kind)
			if rel, ok := body.(map[string]any)["relation"].(map[string]any); ok {
				p.relations = append(p.relations, rel["schemaname"].(string)+"."+rel["relname"].(string))
			}
			walk(body, &p.strings)
		}
	}
	return p
}

// walk collects every string constant's value under v, in order.
func walk(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		if c, ok := x["A_Const"].(map[string]any); ok {
			if s, ok := c["sval"].(map[string]any); ok {
				*out = append(*out, s["sval"].(string))
			}
			return
		}
		// Map order is random; constants are compared as a set below.
		for _, e := range x {
			walk(e, out)
		}
	case []any:
		for _, e := range x {
			walk(e, out)
		}
	}
}

func TestSQLQuotesEveryIdentifierAndValue(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	seq := int64(7)
	s := &Snapshot{
		Schema:   `Cat "X" Sch`,
		History:  []Migration{{Version: 1, Name: "catalog", AppliedAt: at}},
		Instance: Instance{CatalogSchema: `Cat "X" Sch`, TargetSchema: "Tgt Schema", CreatedAt: at},
		NSegs:    4,
		Sources: []catalog.Source{{ID: 3, Schema: "My Schema", Table: `Odd "T" \ name`, KeyCols: []string{"Key Col", `q"k'`},
			KeyTypes: []string{"integer", "text"}, CapCols: []string{"UPPER"}, CapTypes: []string{"numeric(10,2)"}}},
		Transforms: []Transform{{ID: 2, TargetSchema: "Tgt Schema", TargetName: `Weird "T" Name`,
			Statement: "TRANSFORM \"Weird \"\"T\"\" Name\" FROM \"Odd \"\"T\"\" \\ name\"\nSELECT \"Key Col\" || 'it''s \\ ok' AS x; DROP TABLE y",
			Spec:      `{"columns": [{"expr": "\"Key Col\" || E'it''s \\\\ ok'", "name": "x"}]}`, CreatedAt: at}},
		Links:         []Link{{TransformID: 2, SourceID: 3}},
		SourcesSeq:    &seq,
		TransformsSeq: &seq,
	}
	sql := s.SQL()
	p := parse(t, sql)
	require.Equal(t, []string{"InsertStmt", "InsertStmt", "InsertStmt", "InsertStmt", "InsertStmt", "InsertStmt", "InsertStmt", "SelectStmt"}, p.kinds,
		"one statement per catalog table and one setval: nothing a value holds runs as SQL")
	for _, rel := range p.relations {
		require.True(t, strings.HasPrefix(rel, `Cat "X" Sch.`), "every table is the catalog's, quoted: %s", rel)
	}
	require.Equal(t, []string{`Cat "X" Sch.schema_migrations`, `Cat "X" Sch.trellis_instance`, `Cat "X" Sch.ring`, `Cat "X" Sch.cuts`,
		`Cat "X" Sch.sources`, `Cat "X" Sch.transforms`, `Cat "X" Sch.transform_sources`}, p.relations)
	for _, want := range []string{
		"catalog", `Cat "X" Sch`, "Tgt Schema", "My Schema", `Odd "T" \ name`, "Key Col", `q"k'`, "UPPER", "numeric(10,2)",
		`Weird "T" Name`, s.Transforms[0].Statement, s.Transforms[0].Spec,
		`"Cat ""X"" Sch"."sources"`, `"Cat ""X"" Sch"."transforms"`, "2026-03-04 05:06:07.891011+00",
	} {
		require.Contains(t, p.strings, want, "a value reads back as it was")
	}
	// A value with a backslash is an escape string, which reads the same
	// whatever standard_conforming_strings is.
	require.Contains(t, sql, `E'Odd "T" \\ name'`)
	require.NotContains(t, sql, `'Odd "T" \ name'`)

	// A catalog schema whose name breaks a line cannot end the header's
	// comment early.
	s.Schema = "evil\nDROP TABLE x; --"
	p = parse(t, s.SQL())
	require.Len(t, p.kinds, 8)
	require.NotContains(t, p.kinds, "DropStmt")
}

func TestSQLOfNoDefinitions(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &Snapshot{Schema: "trellis", History: []Migration{{Version: 1, Name: "catalog", AppliedAt: at}},
		Instance: Instance{CatalogSchema: "trellis", TargetSchema: "public", CreatedAt: at}, NSegs: 4}
	p := parse(t, s.SQL())
	require.Equal(t, []string{"trellis.schema_migrations", "trellis.trellis_instance", "trellis.ring", "trellis.cuts"}, p.relations,
		"the rows the catalog's migration seeds, and no setval of a sequence never used")
	require.Equal(t, s.SQL(), s.SQL(), "deterministic")
	require.Contains(t, s.SQL(), "(0 transforms)")
}
