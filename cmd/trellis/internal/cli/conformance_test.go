package cli_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
)

// grammarCase is one case of testdata/conformance/grammar.json.
type grammarCase struct {
	Name      string `json:"name"`
	Statement string `json:"statement"`
	OK        bool   `json:"ok"`
	Kind      string `json:"kind"`
	ErrorKind string `json:"error_kind"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
}

// TestGrammarConformance runs every statement of the grammar's conformance
// cases through trellis apply, on a database without the tables they name:
// the refused ones must fail, syntax errors saying where.
func TestGrammarConformance(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../../../testdata/conformance/grammar.json")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("testdata/conformance/grammar.json does not exist")
	}
	require.NoError(t, err)
	var cases []grammarCase
	require.NoError(t, json.Unmarshal(raw, &cases))
	require.NotEmpty(t, cases)

	e := setup(t)
	e.ok("migrate")
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			r := runIn(e.ctx, "", "apply", tc.Statement, "--url", e.url)
			if tc.OK {
				return // it may still fail: its tables do not exist
			}
			require.Equal(t, cli.ExitError, r.code, "%q was applied: %s", tc.Statement, r.stdout)
			require.Regexp(t, `^trellis: \S`, r.stderr)
			if tc.ErrorKind == "syntax" {
				require.Contains(t, r.stderr, fmt.Sprintf("line %d, column %d", tc.Line, tc.Column), "%q", tc.Statement)
			}
		})
	}
}
