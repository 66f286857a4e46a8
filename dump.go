package trellis

import (
	"context"

	"github.com/trellis-pg/trellis/internal/dump"
)

// DumpDefinitionsSQL returns the SQL that loads this instance's definitions
// into a database built from a schema-only dump (pg_dump --schema-only):
// append it to the dump, as `trellis dump` does. Such a dump holds the
// catalog's tables, the target tables and the capture triggers, but no
// rows, so without it the loaded database has targets and no transforms.
//
// The SQL inserts the catalog rows that say what is defined (the catalog's
// migration history, its instance marker and the rows its migration seeds,
// the definitions, oldest first, and the sources they read), read in one
// repeatable-read snapshot, and nothing else: the ledger, builds,
// quarantine, failures and claims are runtime state about rows a
// schema-only dump does not carry. Every definition loads as a define
// commits it, StateWaitingToBackfill with no column paused, also one that
// was paused or quarantined where it was dumped; the staging worker that
// starts on the loaded database reinstalls capture and builds each target
// from its source. Migrate on the loaded database does nothing.
//
// The text is deterministic: two calls return the same text unless a
// definition changed in between. A catalog that was never migrated is a
// CodeNotFound error.
func (c *Client) DumpDefinitionsSQL(ctx context.Context) (string, error) {
	var out string
	err := c.call(ctx, "dumping the definitions", func(ctx context.Context) error {
		var err error
		out, err = dump.Definitions(ctx, c.pool, c.opts.Schema)
		return err
	})
	return out, err
}
