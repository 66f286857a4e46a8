package trellis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// monetaryLocale is the locale the money tests write under: one whose
// lc_monetary renders money unlike the C locale Trellis pins. .ci/run
// generates it; the tests skip where the server has no such locale.
const monetaryLocale = "de_DE.UTF-8"

// requireMonetaryLocale skips the test unless the server accepts
// lc_monetary = monetaryLocale and it changes money's text.
func (e *env) requireMonetaryLocale() {
	e.t.Helper()
	var c, other string
	tx, err := e.db.Begin(e.ctx)
	require.NoError(e.t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	require.NoError(e.t, tx.QueryRow(e.ctx, `SELECT 1234.5::numeric::money::text`).Scan(&c))
	if _, err := tx.Exec(e.ctx, "SET LOCAL lc_monetary = '"+monetaryLocale+"'"); err != nil {
		e.t.Skipf("the server has no %s locale (.ci/run generates it with localedef): %v", monetaryLocale, err)
	}
	require.NoError(e.t, tx.QueryRow(e.ctx, `SELECT 1234.5::numeric::money::text`).Scan(&other))
	if other == c {
		e.t.Skipf("lc_monetary = %s renders money as the C locale does (%s)", monetaryLocale, c)
	}
}

// A writer whose session sets another lc_monetary (money's text there is
// "1.234,50 €", not "$1,234.50") records a money key, and a money value
// capture keeps for a GROUP BY, as every other session does: one key, one
// bucket, one key lock for the same key whoever writes it, and the targets
// equal a fresh recompute once the drain has read those changes back.
func TestMoneyKeysAreTheSameFromEveryLocale(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.requireMonetaryLocale()
	e.exec(`CREATE TABLE mk (m money PRIMARY KEY, v int NOT NULL)`)
	e.exec(`CREATE TABLE priced (id int PRIMARY KEY, price money NOT NULL, v int NOT NULL)`)
	e.exec(`INSERT INTO mk SELECT (i * 1000.5)::numeric::money, i FROM generate_series(1, 5) i`)
	e.exec(`CREATE INDEX ON priced (price)`)
	e.exec(`INSERT INTO priced SELECT i, (1000.5 * (1 + i % 3))::numeric::money, i FROM generate_series(1, 30) i`)
	writer := e.role("writer", "GRANT SELECT, INSERT, UPDATE, DELETE ON mk, priced TO %s")
	c := e.engine()
	for _, d := range []string{
		"TRANSFORM by_m FROM mk SELECT v AS v",
		"TRANSFORM by_price FROM priced SELECT price AS price, sum(v) AS s, count(*) AS n GROUP BY price",
	} {
		_, err := c.Define(e.ctx, d)
		require.NoError(t, err, d)
	}
	e.waitState(c, "by_m", trellis.StateLive)
	e.waitState(c, "by_price", trellis.StateLive)
	require.NoError(t, c.Close())

	local := "SET LOCAL lc_monetary = '" + monetaryLocale + "'"
	e.as(writer, `UPDATE mk SET v = 10 WHERE m = 1000.5::numeric::money`)
	e.as(writer, local, `UPDATE mk SET v = 11 WHERE m = 1000.5::numeric::money`)
	e.as(writer, local, `UPDATE priced SET v = v + 1 WHERE id = 1`, `UPDATE priced SET price = 1000.5::numeric::money WHERE id = 2`)
	e.as(writer, `UPDATE priced SET v = v + 1 WHERE id = 4`)
	mk := `(SELECT id FROM trellis.sources WHERE table_name = 'mk')`
	require.Equal(t, [][]string{{"1"}}, e.rows(`SELECT count(DISTINCT key) FROM trellis.ledger WHERE src = `+mk),
		"one key, recorded as %v", e.rows(`SELECT key FROM trellis.ledger WHERE src = `+mk))
	// The old and new prices of a change made under the other locale are
	// the C locale's texts too: the drain reads them back as money.
	require.Empty(t, e.rows(`SELECT v FROM trellis.ledger, unnest(vals) v WHERE src <> `+mk+` AND v NOT LIKE '$%'`))

	c = e.engine()
	e.as(writer, local, `DELETE FROM mk WHERE m = 2001::numeric::money`, `INSERT INTO mk VALUES (7.25::numeric::money, 7)`,
		`UPDATE priced SET price = 3001.5::numeric::money WHERE id % 5 = 0`)
	e.converge(c)
	e.requireLiveAndExact(c, "by_m", "SELECT m, v FROM mk")
	e.requireLiveAndExact(c, "by_price", "SELECT price, sum(v) AS s, count(*) AS n FROM priced GROUP BY price")
}
