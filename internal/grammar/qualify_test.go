package grammar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQualifyNamesTheSchemasTheDefinerResolved(t *testing.T) {
	s := Schemas{
		Funcs: map[string]string{"tax": "public", "band": "app"},
		Types: map[string]string{"mood": "app"},
		Ops:   map[string]string{"###": "public"},
	}
	got, err := Qualify(`tax(price) + band(x::mood, lower(y)) ### 1`, s)
	require.NoError(t, err)
	require.Equal(t, `(public.tax(price) + app.band(x::app.mood, lower(y))) OPERATOR(public.###) 1`, got)

	same := `lower(y) || 'x'`
	got, err = Qualify(same, s)
	require.NoError(t, err)
	require.Equal(t, same, got, "nothing to qualify")
	s.Default = "pg_catalog"
	got, err = Qualify(`tax(price) || lower(y) || 'x'`, s)
	require.NoError(t, err)
	require.Equal(t, `(public.tax(price) OPERATOR(pg_catalog.||) pg_catalog.lower(y)) OPERATOR(pg_catalog.||) 'x'`, got)
	got, err = Qualify(`other.tax(1)`, s)
	require.NoError(t, err)
	require.Equal(t, `other.tax(1)`, got, "a qualified name stays as written")
}
