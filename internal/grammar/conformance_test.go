package grammar

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// conformanceCase is one case of testdata/conformance/grammar.json, a file
// the CLI's tests read as well.
type conformanceCase struct {
	Name      string `json:"name"`
	Statement string `json:"statement"`
	OK        bool   `json:"ok"`
	Kind      string `json:"kind,omitempty"`       // transform|pause|resume|drop|alter, when ok
	ErrorKind string `json:"error_kind,omitempty"` // syntax|invalid, when not ok
	Line      int    `json:"line,omitempty"`
	Column    int    `json:"column,omitempty"`
}

func TestConformance(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../testdata/conformance/grammar.json")
	require.NoError(t, err)
	var cases []conformanceCase
	require.NoError(t, json.Unmarshal(data, &cases))
	require.GreaterOrEqual(t, len(cases), 40)
	names := map[string]bool{}
	for _, c := range cases {
		require.Falsef(t, names[c.Name], "duplicate case name %q", c.Name)
		names[c.Name] = true
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			st, err := Parse(c.Statement)
			if c.OK {
				require.NoError(t, err)
				require.Equal(t, c.Kind, KindOf(st))
				return
			}
			var pe *Error
			require.True(t, errors.As(err, &pe), "want a %s error, got %v", c.ErrorKind, err)
			require.Equal(t, ErrorKind(c.ErrorKind), pe.Kind, pe.Error())
			require.Equal(t, c.Line, pe.Line, pe.Error())
			require.Equal(t, c.Column, pe.Column, pe.Error())
		})
	}
}
