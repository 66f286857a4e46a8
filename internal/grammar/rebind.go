package grammar

import (
	"fmt"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Rebind rewrites the parameter references ($1, $2, ...) of a statement
// Trellis generated: each is replaced by what sub returns for its number.
// It uses PostgreSQL's own scanner, so a "$1" inside a string literal, a
// quoted identifier or a comment of a user's expression is left alone.
func Rebind(sql string, sub func(n int) string) (string, error) {
	res, err := pgScan(sql)
	if err != nil {
		return "", fmt.Errorf("scanning a statement to rebind its parameters: %w", err)
	}
	var b strings.Builder
	last := 0
	for _, t := range res.GetTokens() {
		if t.GetToken() != pg.Token_PARAM {
			continue
		}
		start, end := int(t.GetStart()), int(t.GetEnd())
		if start < last || end > len(sql) || !strings.HasPrefix(sql[start:end], "$") {
			return "", fmt.Errorf("unexpected parameter token at byte %d", start)
		}
		n, err := strconv.Atoi(sql[start+1 : end])
		if err != nil {
			return "", fmt.Errorf("unexpected parameter %q", sql[start:end])
		}
		b.WriteString(sql[last:start])
		b.WriteString(sub(n))
		last = end
	}
	b.WriteString(sql[last:])
	return b.String(), nil
}
