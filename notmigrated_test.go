package trellis_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// Before Migrate, every call says the catalog is missing and what to run,
// never which relation PostgreSQL could not find.
func TestCallsBeforeMigrateSayToMigrate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, price int)`)
	c := e.connect(trellis.Options{})
	calls := map[string]func() error{
		"Status":      func() error { _, err := c.Status(e.ctx, "order_totals"); return err },
		"Definitions": func() error { _, err := c.Definitions(e.ctx); return err },
		"Define": func() error {
			_, err := c.Define(e.ctx, "TRANSFORM order_totals FROM orders SELECT price AS p")
			return err
		},
		"Quarantined":   func() error { _, err := c.Quarantined(e.ctx); return err },
		"WatermarkWait": func() error { _, err := c.WatermarkToken(e.ctx); return err },
		"Sync": func() error {
			_, err := c.Sync(e.ctx, "TRANSFORM order_totals FROM orders SELECT price AS p", trellis.SyncOptions{})
			return err
		},
		"DetectCaptureDisruptions": func() error { _, err := c.DetectCaptureDisruptions(e.ctx); return err },
	}
	for name, call := range calls {
		err := call()
		if name == "WatermarkWait" && err == nil {
			continue // a watermark needs no catalog
		}
		require.Error(t, err, name)
		require.Equal(t, trellis.CodeNotFound, trellis.CodeOf(err), "%s: %v", name, err)
		require.True(t, errors.Is(err, trellis.ErrNotMigrated), "%s: %v", name, err)
		require.Contains(t, err.Error(), `the Trellis catalog in schema "trellis" does not exist`, name)
		require.NotContains(t, err.Error(), "relation", name)
	}
}
