package catalog

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/plan"
)

// sqlTableShape reads, for a quoted qualified table name, whether the table
// exists, the names of its columns (system columns included: a definition
// may read one), and the key columns of each index that identifies its rows
// (see IdentifyingIndex and NullableKeyIndex), sorted and joined by U+001F; and for a plain
// table, its first inheritance link ("" for none): how it is linked, the
// other table and the table itself (both quoted as needed), joined by
// U+001F.
const sqlTableShape = `
SELECT c.rel IS NOT NULL,
       coalesce((SELECT array_agg(a.attname::text) FROM pg_attribute a
                 WHERE a.attrelid = c.rel AND NOT a.attisdropped), '{}'),
       coalesce((SELECT array_agg(k.cols)
                 FROM pg_index i
                 CROSS JOIN LATERAL (SELECT string_agg(a.attname::text, chr(31) ORDER BY a.attname)
                                     FROM pg_attribute a
                                     WHERE a.attrelid = i.indrelid AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])) AS k(cols)
                 WHERE i.indrelid = c.rel AND (` + IdentifyingIndex + ` OR ` + NullableKeyIndex + `)), '{}'),
       coalesce((SELECT l.how || chr(31) || l.other || chr(31) || format('%I.%I', tn.nspname, tc.relname) FROM (
                   SELECT CASE WHEN pc.relkind = 'p' THEN 'partition' ELSE 'inherits' END AS how,
                          format('%I.%I', pn.nspname, pc.relname) AS other, 0 AS ord
                   FROM pg_inherits i JOIN pg_class pc ON pc.oid = i.inhparent JOIN pg_namespace pn ON pn.oid = pc.relnamespace
                   WHERE i.inhrelid = c.rel
                   UNION ALL
                   SELECT 'inherited', format('%I.%I', kn.nspname, kc.relname), 1
                   FROM pg_inherits i JOIN pg_class kc ON kc.oid = i.inhrelid JOIN pg_namespace kn ON kn.oid = kc.relnamespace
                   WHERE i.inhparent = c.rel
                   ORDER BY 3, 2 LIMIT 1) l
                 JOIN pg_class tc ON tc.oid = c.rel JOIN pg_namespace tn ON tn.oid = tc.relnamespace
                 WHERE tc.relkind = 'r'), '')
FROM (SELECT to_regclass($1) AS rel) c`

// IdentifyingIndex is the condition on pg_index i under which an index
// identifies a table's rows for Trellis: its primary key, or a valid,
// immediate, non-partial unique index over plain columns that are all
// NOT NULL (NULLs would let two rows share a key).
const IdentifyingIndex = `(i.indisvalid AND i.indimmediate AND i.indpred IS NULL AND i.indexprs IS NULL
       AND (i.indisprimary OR (i.indisunique AND NOT EXISTS (
           SELECT 1 FROM pg_attribute na
           WHERE na.attrelid = i.indrelid AND na.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1]) AND NOT na.attnotnull))))`

// NullableKeyIndex is the condition on pg_index i under which an index
// identifies a Trellis target's rows by a key that may be NULL (decision
// 0049): valid, immediate, non-partial, unique over plain columns with
// NULLS NOT DISTINCT, so that no two rows share a key, NULL parts
// included.
const NullableKeyIndex = `(i.indisvalid AND i.indimmediate AND i.indpred IS NULL AND i.indexprs IS NULL
       AND i.indisunique AND i.indnullsnotdistinct)`

type tableShape struct {
	cols []string
	keys []string // per identifying index, its sorted columns joined by U+001F
	link string   // a plain table's first inheritance link: how, the other table and itself, joined by U+001F
}

func (s *tableShape) has(col string) bool { return slices.Contains(s.cols, col) }

// keyed reports whether an index identifying the table's rows (its primary
// key, or a unique index over NOT NULL columns) is on exactly the key
// columns (in any order: the key is a set of columns that stays unique).
func (s *tableShape) keyed(keyCols []string) bool {
	want := slices.Clone(keyCols)
	slices.Sort(want)
	return slices.Contains(s.keys, strings.Join(want, "\x1f"))
}

func readShape(ctx context.Context, q Querier, src plan.Source) (*tableShape, error) {
	var exists bool
	var sh tableShape
	if err := q.QueryRow(ctx, sqlTableShape, ident.Qualified(src.Schema, src.Table)).Scan(&exists, &sh.cols, &sh.keys, &sh.link); err != nil {
		return nil, fmt.Errorf("reading the columns of %s.%s: %w", src.Schema, src.Table, err)
	}
	if !exists {
		return nil, nil
	}
	return &sh, nil
}

// ReadsProblem is what CheckReads found wrong with the source columns a
// definition reads.
type ReadsProblem struct {
	Table   string   // "schema.table"
	Columns []string // sorted; the key columns, in key order, when NoKey
	// NoKey says the columns exist but the table no longer has a primary
	// key on them.
	NoKey bool
	// Outputs are the target columns that read the missing columns, when
	// nothing else does (no key, GROUP BY, WHERE or ON): dropping them with
	// ALTER TRANSFORM ... DROP COLUMN is a fix. Nil otherwise.
	Outputs []string
	// Link, when not "", says that the table (a plain one) is linked by
	// inheritance so that some of its writes never fire its statement-level
	// capture: "partition" (it is a partition of Other, and inserts routed
	// through Other skip it), "inherits" (updates and deletes through Other
	// skip it) or "inherited" (Other inherits from it, and writes to Other
	// skip it). Columns is empty then.
	Link   string
	Other  string // the other table of Link, qualified, quoted where SQL needs it
	Quoted string // Table, quoted where SQL needs it (set with Link)
}

// MissingReads checks that the source columns t's definition reads still
// exist: its FROM table's (t.Spec.Reads and the key columns), then its
// joined table's (t.Spec.Join.Source.Reads and key columns). It returns the
// first table ("schema.table") that lacks some, with the missing columns
// sorted; or, for a table that no longer has a primary key on the key
// columns Trellis recorded, that table with its key columns. It returns ""
// and nil when nothing is missing. A table that no longer exists is not
// reported here: the capture disruption check pauses its readers.
func (c *Catalog) MissingReads(ctx context.Context, q Querier, t *Transform) (string, []string, error) {
	p, err := c.CheckReads(ctx, q, t)
	if err != nil || p == nil {
		return "", nil, err
	}
	return p.Table, p.Columns, nil
}

// CheckReads is MissingReads, saying also which of the two it found; nil
// when nothing is wrong.
func (c *Catalog) CheckReads(ctx context.Context, q Querier, t *Transform) (*ReadsProblem, error) {
	type side struct {
		src   plan.Source
		reads []string
		// sure are the reads known to be this side's; other reads of the
		// FROM side of a join may be the joined table's (see below).
		sure []string
	}
	spec := specText{t.Spec}
	sides := []side{{src: spec.Source, reads: spec.Reads, sure: spec.Source.Needs}}
	for _, j := range spec.JoinList() {
		sides = append(sides, side{src: j.Source, reads: j.Source.Reads, sure: j.Source.Reads})
	}
	for _, sj := range spec.Semis {
		sides = append(sides, side{src: sj.Source, reads: sj.Source.Reads, sure: sj.Source.Reads})
	}
	for _, j := range spec.JoinList() {
		for _, on := range j.On {
			sides[j.To].sure = append(sides[j.To].sure, on.From)
		}
	}
	for _, sj := range spec.Semis {
		for _, on := range sj.On {
			sides[sj.To].sure = append(sides[sj.To].sure, on.From)
		}
	}
	shapes := make([]*tableShape, len(sides))
	for i, sd := range sides {
		var err error
		if shapes[i], err = readShape(ctx, q, sd.src); err != nil {
			return nil, err
		}
	}
	joinedHas := func(col string) bool {
		return slices.ContainsFunc(shapes[1:], func(sh *tableShape) bool { return sh != nil && sh.has(col) })
	}
	for i, sd := range sides {
		sh := shapes[i]
		if sh == nil {
			continue
		}
		var missing []string
		for _, col := range append(slices.Clone(sd.src.KeyCols), sd.reads...) {
			if sh.has(col) || slices.Contains(missing, col) {
				continue
			}
			key := slices.Contains(sd.src.KeyCols, col)
			// ALTER TRANSFORM ... ADD COLUMN records the columns the new
			// expression reads with the FROM table's, whichever table they
			// belong to: a FROM-side read that the joined table has may be
			// the joined table's, and is not counted as missing.
			if i == 0 && joinedHas(col) && !key && !slices.Contains(sd.sure, col) {
				continue
			}
			// ALTER TRANSFORM ... DROP COLUMN leaves the reads of the
			// dropped expression recorded: a column no expression of the
			// definition mentions any more is not read.
			if !key && !spec.mentions(col) {
				continue
			}
			missing = append(missing, col)
		}
		name := sd.src.Schema + "." + sd.src.Table
		if len(missing) > 0 {
			slices.Sort(missing)
			return &ReadsProblem{Table: name, Columns: missing, Outputs: droppable(spec, sd.src, missing)}, nil
		}
		if !sh.keyed(sd.src.KeyCols) {
			return &ReadsProblem{Table: name, Columns: slices.Clone(sd.src.KeyCols), NoKey: true}, nil
		}
		if l := strings.Split(sh.link, "\x1f"); len(l) == 3 {
			return &ReadsProblem{Table: name, Columns: []string{}, Link: l[0], Other: l[1], Quoted: l[2]}, nil
		}
	}
	return nil, nil
}

// specText reads which columns a definition's expressions mention.
type specText struct{ plan.Spec }

// fixed are the expressions of a definition that ALTER TRANSFORM cannot
// drop: its key, GROUP BY, WHERE, and a window's PARTITION BY and rank.
func (s specText) fixed() []string {
	out := append([]string{s.Where}, s.GroupBy...)
	for _, k := range s.Key {
		out = append(out, k.Expr)
	}
	if w := s.Window; w != nil {
		out = append(append(out, w.Partition...), w.Rank)
	}
	return out
}

// mentions reports whether any expression of the definition, or its ON
// clause or captured columns, names col.
func (s specText) mentions(col string) bool {
	if s.inFixed(col) {
		return true
	}
	for _, c := range s.Columns {
		if Mentions(c.Expr, col) {
			return true
		}
	}
	return false
}

func (s specText) inFixed(col string) bool {
	if slices.Contains(s.Source.Needs, col) {
		return true
	}
	for _, j := range s.JoinList() {
		if slices.Contains(j.Source.Needs, col) {
			return true
		}
		for _, on := range j.On {
			if on.From == col || on.Joined == col {
				return true
			}
		}
	}
	for _, sj := range s.Semis {
		if slices.Contains(sj.Source.Reads, col) {
			return true
		}
		for _, on := range sj.On {
			if on.From == col {
				return true
			}
		}
	}
	for _, e := range s.fixed() {
		if Mentions(e, col) {
			return true
		}
	}
	return false
}

// droppable lists the target columns reading the missing columns of src,
// when only target columns do (and none of them is a key column).
func droppable(s specText, src plan.Source, missing []string) []string {
	var out []string
	for _, col := range missing {
		if slices.Contains(src.KeyCols, col) || s.inFixed(col) {
			return nil
		}
		for _, c := range s.Columns {
			if Mentions(c.Expr, col) && !slices.Contains(out, c.Name) {
				out = append(out, c.Name)
			}
		}
	}
	return out
}

// Mentions reports whether the SQL expression expr names col as an
// identifier: bare (case-folded) or quoted, outside string literals. It
// errs towards yes: a table alias or function of the same name counts.
func Mentions(expr, col string) bool {
	escapes := false // the string literal next is an E'' one
	for i := 0; i < len(expr); {
		ch := expr[i]
		switch {
		case ch == '\'':
			// A string literal; '' is a quote inside it, and so is \' in
			// an E'' one.
			e := escapes
			escapes = false
			i++
			for i < len(expr) {
				if e && expr[i] == '\\' {
					i += 2
					continue
				}
				if expr[i] == '\'' {
					if i+1 < len(expr) && expr[i+1] == '\'' {
						i += 2
						continue
					}
					break
				}
				i++
			}
			i++
		case ch == '"':
			var b strings.Builder
			i++
			for i < len(expr) {
				if expr[i] == '"' {
					if i+1 < len(expr) && expr[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					break
				}
				b.WriteByte(expr[i])
				i++
			}
			i++
			if b.String() == col {
				return true
			}
		case ch == '_' || ch >= 0x80 || ('a' <= ch && ch <= 'z') || ('A' <= ch && ch <= 'Z'):
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == '$' || expr[j] >= 0x80 ||
				('a' <= expr[j] && expr[j] <= 'z') || ('A' <= expr[j] && expr[j] <= 'Z') || ('0' <= expr[j] && expr[j] <= '9')) {
				j++
			}
			if strings.ToLower(expr[i:j]) == col {
				return true
			}
			escapes = j == i+1 && (ch == 'e' || ch == 'E') && j < len(expr) && expr[j] == '\''
			i = j
		case '0' <= ch && ch <= '9':
			// A number (1e5, 0x1F): not an identifier.
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == '.' || ('a' <= expr[j] && expr[j] <= 'z') ||
				('A' <= expr[j] && expr[j] <= 'Z') || ('0' <= expr[j] && expr[j] <= '9')) {
				j++
			}
			i = j
		default:
			i++
		}
	}
	return false
}
