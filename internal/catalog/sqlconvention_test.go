package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMigrationsFollowTheSQLConvention expands every migration the way
// Migrate does: a placeholder of another convention, or a percent sign
// not written %%, would reach PostgreSQL as text.
func TestMigrationsFollowTheSQLConvention(t *testing.T) {
	ms, err := Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	c := New(`Odd "S"`)
	for _, m := range ms {
		sql := c.SQL(m.SQL)
		assert.NotContains(t, sql, "%!", "migration %d: a %% that is not %%%% or a bad verb", m.Version)
		assert.NotContains(t, sql, "{{", "migration %d: a {{...}} placeholder; the schema is %%[1]s", m.Version)
		assert.Contains(t, sql, `"Odd ""S"""`, "migration %d never names the catalog schema", m.Version)
	}
}

func TestSQLFillsTheSchemaAndIdentifiers(t *testing.T) {
	c := New(`a"b`)
	assert.Equal(t, `SELECT 1 FROM "a""b"."seg_1" WHERE x LIKE 'p%'`,
		c.SQL(`SELECT 1 FROM %[1]s.%[2]s WHERE x LIKE 'p%%'`, `"seg_1"`))
	assert.False(t, strings.Contains(c.SQL(sqlGen), "%"))
}
