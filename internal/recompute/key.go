package recompute

import (
	"strings"
)

// RenderKey renders a key's values the way the quarantine reports them,
// one rendering per key: one value as itself, several as a row ("(a,b)");
// a NULL is NULL alone and nothing inside a row. A value that could be
// read as something else (empty, "NULL", or with quotes, commas,
// parentheses, backslashes or spaces in a row) is double-quoted.
func RenderKey(key []*string) string {
	if len(key) == 1 {
		switch v := key[0]; {
		case v == nil:
			return "NULL"
		case *v == "" || *v == "NULL" || strings.HasPrefix(*v, `"`):
			return quoteKeyValue(*v)
		default:
			return *v
		}
	}
	var b strings.Builder
	b.WriteByte('(')
	for i, v := range key {
		if i > 0 {
			b.WriteByte(',')
		}
		if v == nil {
			continue
		}
		if *v == "" || strings.ContainsAny(*v, `,()"\ `) {
			b.WriteString(quoteKeyValue(*v))
		} else {
			b.WriteString(*v)
		}
	}
	b.WriteByte(')')
	return b.String()
}

func quoteKeyValue(v string) string {
	return `"` + strings.NewReplacer(`"`, `""`, `\`, `\\`).Replace(v) + `"`
}

// Ptrs is a key's values as nullable text, the form keys take in works.
func Ptrs(ss []string) []*string {
	out := make([]*string, len(ss))
	for i := range ss {
		out[i] = &ss[i]
	}
	return out
}

// hasNull reports whether some key has a NULL value (a NULL group).
func hasNull(keys [][]*string) bool {
	for _, k := range keys {
		for _, v := range k {
			if v == nil {
				return true
			}
		}
	}
	return false
}
