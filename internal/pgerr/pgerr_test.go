package pgerr

import (
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
)

func TestCodeAndClass(t *testing.T) {
	err := fmt.Errorf("applying a page: %w", &pgconn.PgError{Code: pgerrcode.LockNotAvailable})
	assert.Equal(t, "55P03", Code(err))
	assert.True(t, Is(err, pgerrcode.QueryCanceled, pgerrcode.LockNotAvailable))
	assert.False(t, Is(err, pgerrcode.QueryCanceled))
	assert.False(t, Is(fmt.Errorf("not from PostgreSQL"), pgerrcode.LockNotAvailable))
	assert.Equal(t, "", Code(nil))

	// A code pgerrcode does not list still belongs to its class.
	assert.True(t, InClass("22ZZZ", pgerrcode.DataException))
	assert.True(t, InClass(pgerrcode.DivisionByZero, pgerrcode.IntegrityConstraintViolation, pgerrcode.DataException))
	assert.False(t, InClass(pgerrcode.UniqueViolation, pgerrcode.DataException))
	assert.False(t, InClass("", pgerrcode.DataException))
}
