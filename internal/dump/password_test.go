package dump

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitPasswordKeepsItOffTheCommandLine(t *testing.T) {
	for _, c := range []struct{ in, conn, pw string }{
		{"postgres://u:s3cret@h:5/db", "postgres://u@h:5/db", "s3cret"},
		{"host=h user=u password=s3cret dbname=db", "host='h' user='u' dbname='db'", "s3cret"},
		{`host=h password='x \' a \\ pw' dbname = db`, "host='h' dbname='db'", `x ' a \ pw`},
		{`password = 'a b\'c' host=h`, "host='h'", `a b'c`},
		{"host=h dbname=db", "host=h dbname=db", ""},
	} {
		conn, pw := splitPassword(c.in)
		require.Equal(t, c.conn, conn, c.in)
		require.Equal(t, c.pw, pw, c.in)
	}
}
