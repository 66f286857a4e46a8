package trellis_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// defineConformance is testdata/conformance/define.json: statements
// defined over fixed tables, each with the target's columns and key it
// creates, or the error code and message it is refused with. An ALTER
// TRANSFORM statement is applied instead, and an accepted one names the
// target whose columns and key it leaves.
type defineConformance struct {
	Setup []string `json:"setup"`
	Cases []struct {
		Name      string   `json:"name"`
		Statement string   `json:"statement"`
		Target    string   `json:"target,omitempty"`
		OK        bool     `json:"ok"`
		Columns   []string `json:"columns,omitempty"`
		Key       []string `json:"key,omitempty"`
		Code      string   `json:"code,omitempty"`
		Message   string   `json:"message,omitempty"`
	} `json:"cases"`
}

func TestDefineConformance(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/conformance/define.json")
	require.NoError(t, err)
	var conf defineConformance
	require.NoError(t, json.Unmarshal(raw, &conf))
	e := setup(t)
	for _, q := range conf.Setup {
		e.exec(q)
	}
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	// The cases run in order: a refused case may name an accepted one.
	for _, c := range conf.Cases {
		var target string
		var err error
		if strings.HasPrefix(c.Statement, "ALTER ") {
			_, err = m.Apply(e.ctx, c.Statement)
			target = c.Target
		} else {
			target, err = m.Define(e.ctx, c.Statement)
		}
		if !c.OK {
			require.Error(t, err, c.Name)
			require.Equal(t, trellis.Code(c.Code), trellis.CodeOf(err), "%s: %v", c.Name, err)
			require.Contains(t, err.Error(), c.Message, c.Name)
			continue
		}
		require.NoError(t, err, c.Name)
		cols := e.rows(`SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, target)
		var names []string
		for _, r := range cols {
			names = append(names, r[0])
		}
		require.Equal(t, c.Columns, names, c.Name)
		// The key: the primary key, else the unique index's columns (none
		// for an index on an expression: a global aggregate's).
		key := e.rows(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			WHERE i.indrelid = $1::regclass AND i.indisunique ORDER BY array_position(i.indkey::int2[], a.attnum)`, target)
		var keyNames []string
		for _, r := range key {
			keyNames = append(keyNames, r[0])
		}
		if len(c.Key) == 0 {
			require.Empty(t, keyNames, c.Name)
			require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT count(*) FROM pg_index WHERE indrelid = $1::regclass AND indisunique`, target), c.Name)
		} else {
			require.Equal(t, c.Key, keyNames, c.Name)
		}
	}
}
