package cli_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// A key a writer chose, holding terminal escape sequences, control
// characters and a newline, reaches the operator's terminal only escaped:
// through sample, poisoned, quarantined and status, as text and as JSON.
func TestDataReachesTheTerminalEscaped(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const evil = "k\x1b]0;owned\x07\x1b[2J\u009b1m\nforged line"
	e.exec(`CREATE TABLE items (name text PRIMARY KEY, qty int NOT NULL)`)
	e.exec(`INSERT INTO items VALUES ('plain', 1)`)
	e.ok("migrate")
	c := e.workers()
	e.ok("apply", "TRANSFORM big FROM items SELECT qty AS qty")
	e.waitLive(c, "big")
	e.exec(`ALTER TABLE big ADD CONSTRAINT small CHECK (qty < 1000)`)
	e.exec(`INSERT INTO items VALUES ($1, 5000)`, evil)
	e.waitQuarantined(c, "big holding the key", func(m map[string]trellis.QuarantineEntry) bool {
		return m["big"].HeldKeys != nil && m["big"].HeldKeys.Count == 1
	})

	for _, args := range [][]string{
		{"sample", "big"}, {"sample", "big", "--json"},
		{"poisoned", "--since", "1h"}, {"poisoned", "--since", "1h", "--json"},
		{"quarantined"}, {"status", "big"}, {"status"},
	} {
		out := e.ok(args...).stdout
		require.NotContains(t, out, "\x1b", "%q printed an escape character raw:\n%s", args, out)
		require.NotContains(t, out, "\x07", args)
		require.NotContains(t, out, "\u009b", args)
		require.NotContains(t, out, "\nforged line", "%q printed the key's newline raw:\n%s", args, out)
		if args[0] != "quarantined" && !strings.HasPrefix(args[0], "status") {
			require.True(t, strings.Contains(out, `k\x1b]0;owned\x07`) || strings.Contains(out, `k\u001b]0;owned\u0007`),
				"%q does not show the key escaped:\n%s", args, out)
		}
	}
}
