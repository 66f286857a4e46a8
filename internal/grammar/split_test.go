package grammar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	type st = FileStatement
	cases := []struct {
		name string
		in   string
		want []st
	}{
		{"empty", "", nil},
		{"only blanks and comments", "\n  \n-- nothing here\n\t\n-- still nothing\n;\n", nil},
		{"one statement, no newline", "PAUSE TRANSFORM a", []st{{"PAUSE TRANSFORM a", 1}}},
		{"blank lines separate", "PAUSE TRANSFORM a\n\n\nRESUME TRANSFORM a\n", []st{
			{"PAUSE TRANSFORM a", 1}, {"RESUME TRANSFORM a", 4},
		}},
		{"whitespace-only line separates", "PAUSE TRANSFORM a\n  \t \nRESUME TRANSFORM a", []st{
			{"PAUSE TRANSFORM a", 1}, {"RESUME TRANSFORM a", 3},
		}},
		{"semicolon lines separate", "TRANSFORM t FROM s\nSELECT a AS b\n;\nPAUSE TRANSFORM t\n  ;  \nRESUME TRANSFORM t", []st{
			{"TRANSFORM t FROM s\nSELECT a AS b", 1}, {"PAUSE TRANSFORM t", 4}, {"RESUME TRANSFORM t", 6},
		}},
		{"trailing semicolon ends a statement", "PAUSE TRANSFORM a;\nRESUME TRANSFORM a;\nDROP TRANSFORM a ;  ", []st{
			{"PAUSE TRANSFORM a", 1}, {"RESUME TRANSFORM a", 2}, {"DROP TRANSFORM a", 3},
		}},
		{"only one trailing semicolon is stripped", "PAUSE TRANSFORM a;;\n", []st{{"PAUSE TRANSFORM a;", 1}}},
		{"semicolon then comment", "PAUSE TRANSFORM a; -- pause it\nRESUME TRANSFORM a", []st{
			{"PAUSE TRANSFORM a -- pause it", 1}, {"RESUME TRANSFORM a", 2},
		}},
		{"semicolon in the middle stays for the parser", "PAUSE TRANSFORM a; RESUME TRANSFORM a\n", []st{
			{"PAUSE TRANSFORM a; RESUME TRANSFORM a", 1},
		}},
		{"comments", "-- totals per order\nTRANSFORM t FROM s\n-- the columns\nSELECT a AS b\n-- trailing comment\n\n-- next\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s\n-- the columns\nSELECT a AS b", 2}, {"PAUSE TRANSFORM t", 8},
		}},
		{"indented comment", "  -- note\nPAUSE TRANSFORM t", []st{{"PAUSE TRANSFORM t", 2}}},
		{"semicolon inside a string literal", "TRANSFORM t FROM s SELECT 'a;' AS b\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s SELECT 'a;' AS b\nPAUSE TRANSFORM t", 1},
		}},
		{"string literal ending a line with a semicolon", "TRANSFORM t FROM s SELECT a AS b WHERE c <> ';'\n\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s SELECT a AS b WHERE c <> ';'", 1}, {"PAUSE TRANSFORM t", 3},
		}},
		{"semicolon line and blank line inside a multi-line literal", "TRANSFORM t FROM s SELECT 'x\n;\n\n-- not a comment\ny' AS b;\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s SELECT 'x\n;\n\n-- not a comment\ny' AS b", 1}, {"PAUSE TRANSFORM t", 6},
		}},
		{"doubled quotes", "TRANSFORM t FROM s SELECT 'it''s;' AS b\n;\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s SELECT 'it''s;' AS b", 1}, {"PAUSE TRANSFORM t", 3},
		}},
		{"escape string", "TRANSFORM t FROM s SELECT E'a\\';\n;' AS b\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s SELECT E'a\\';\n;' AS b\nPAUSE TRANSFORM t", 1},
		}},
		{"quoted identifier", "TRANSFORM \"a;\n\nb\" FROM s SELECT x AS y;\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM \"a;\n\nb\" FROM s SELECT x AS y", 1}, {"PAUSE TRANSFORM t", 4},
		}},
		{"dollar quote", "TRANSFORM t FROM s SELECT $q$a;\n\n;$q$ AS b;\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s SELECT $q$a;\n\n;$q$ AS b", 1}, {"PAUSE TRANSFORM t", 4},
		}},
		{"block comment", "/* header\n\n;\n*/\nTRANSFORM t FROM s /* a;\n\n */ SELECT a AS b;\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s /* a;\n\n */ SELECT a AS b", 5}, {"PAUSE TRANSFORM t", 8},
		}},
		{"windows line ends", "PAUSE TRANSFORM a;\r\n\r\nRESUME TRANSFORM a\r\n", []st{
			{"PAUSE TRANSFORM a", 1}, {"RESUME TRANSFORM a", 3},
		}},
		{"unterminated literal runs to the end", "TRANSFORM t FROM s SELECT 'a AS b\n\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s SELECT 'a AS b\n\nPAUSE TRANSFORM t", 1},
		}},
		{"parameter is not a dollar quote", "TRANSFORM t FROM s SELECT a AS b WHERE c = $1;\nPAUSE TRANSFORM t", []st{
			{"TRANSFORM t FROM s SELECT a AS b WHERE c = $1", 1}, {"PAUSE TRANSFORM t", 2},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Split(tc.in))
		})
	}
}

func TestFirstLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "TRANSFORM t FROM s", FileStatement{Text: "  TRANSFORM t FROM s\nSELECT a AS b"}.FirstLine())
}
