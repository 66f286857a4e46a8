package cli

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDataNeverReachesTheTerminalAsControls(t *testing.T) {
	evil := "k\x1b]0;owned\x07\x1b[2J\u202e\u009b1m\nforged line\tcol"
	require.Equal(t, `k\x1b]0;owned\x07\x1b[2J\u202e\x9b1m\nforged line\tcol`, printable(evil))
	require.Equal(t, "plain key 42", printable("plain key 42"))

	var buf bytes.Buffer
	fmt.Fprintf(safeWriter{&buf}, "key: %s\n\tnext\n", evil)
	require.Equal(t, "key: k\\x1b]0;owned\\x07\\x1b[2J\\u202e\\x9b1m\nforged line\tcol\n\tnext\n", buf.String(),
		"the writer escapes controls and leaves the output's own newlines and tabs")

	require.Equal(t, `$'a\'b\\c\x1bd\ne'`, shellWord("a'b\\c\x1bd\ne"))
	require.Equal(t, `'a b'`, shellWord("a b"))
}
