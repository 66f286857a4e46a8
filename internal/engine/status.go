package engine

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

var plainColumn = regexp.MustCompile(`^(?:"?[A-Za-z_][A-Za-z0-9_$]*"?\.)?"?([A-Za-z_][A-Za-z0-9_$ ]*)"?$`)

// neededIndexes lists the indexes a definition's maintenance relies on.
func neededIndexes(spec plan.Spec) []trellistype.SourceIndexGap {
	if spec.Global {
		// A global aggregate recomputes its one row from every row: no
		// index finds anything for it.
		return nil
	}
	var out []trellistype.SourceIndexGap
	table := func(s plan.Source) string { return s.Schema + "." + s.Table }
	if len(spec.GroupBy) > 0 {
		groupSide := spec.Source
		if j := spec.Join; j != nil && spec.GroupJoined {
			groupSide = j.Source // the GROUP BY reads the joined table
		}
		var cols []string
		for _, g := range spec.GroupBy {
			if m := plainColumn.FindStringSubmatch(g); m != nil {
				cols = append(cols, m[1])
			} else {
				cols = append(cols, g)
			}
		}
		out = append(out, trellistype.SourceIndexGap{Table: table(groupSide), Columns: cols, Role: trellistype.RoleGroupBy})
	}
	if j := spec.Join; j != nil {
		var from, joined []string
		for _, on := range j.On {
			from = append(from, on.From)
			joined = append(joined, on.Joined)
		}
		out = append(out,
			trellistype.SourceIndexGap{Table: table(spec.Source), Columns: from, Role: trellistype.RoleJoinFrom},
			trellistype.SourceIndexGap{Table: table(j.Source), Columns: joined, Role: trellistype.RoleJoinJoined})
	}
	for i := range out {
		out[i].OptedOut = spec.WithoutSourceIndex
		schema, name, _ := strings.Cut(out[i].Table, ".")
		var parts []string
		for _, c := range out[i].Columns {
			if plainColumn.MatchString(c) && !strings.ContainsAny(c, "( ") {
				parts = append(parts, ident.Quote(c))
			} else {
				parts = append(parts, "("+c+")")
			}
		}
		out[i].Fix = fmt.Sprintf("CREATE INDEX ON %s (%s);", ident.Qualified(schema, name), strings.Join(parts, ", "))
	}
	return out
}

func normalizeExpr(s string) string {
	s = strings.ToLower(s)
	return strings.NewReplacer(" ", "", "(", "", ")", "", `"`, "", "::timestampwithtimezone", "", "::text", "").Replace(s)
}

// IndexGaps returns the indexes a transform needs that its sources lack.
func (e *Engine) IndexGaps(ctx context.Context, q catalog.Querier, spec plan.Spec) ([]trellistype.SourceIndexGap, error) {
	var gaps []trellistype.SourceIndexGap
	for _, g := range neededIndexes(spec) {
		schema, name, _ := strings.Cut(g.Table, ".")
		rows, err := q.Query(ctx, sqlIndexLeads, ident.Qualified(schema, name), len(g.Columns))
		if err != nil {
			return nil, err
		}
		leads, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
		if err != nil {
			return nil, err
		}
		want := make([]string, len(g.Columns))
		for i, c := range g.Columns {
			want[i] = normalizeExpr(c)
		}
		slices.Sort(want)
		found := false
		for _, lead := range leads {
			have := make([]string, len(lead))
			for i, c := range lead {
				have[i] = normalizeExpr(c)
			}
			slices.Sort(have)
			if slices.Equal(have, want) {
				found = true
				break
			}
		}
		if !found {
			gaps = append(gaps, g)
		}
	}
	return gaps, nil
}

// Corrections lists the partitions a transform is being corrected for.
func (e *Engine) Corrections(ctx context.Context, q catalog.Querier, id int) ([]trellistype.CorrectingNode, error) {
	rows, err := q.Query(ctx, e.Cat.SQL(sqlCorrections), id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (trellistype.CorrectingNode, error) {
		var c trellistype.CorrectingNode
		err := r.Scan(&c.Node, &c.Since)
		return c, err
	})
}

// PausedUpstream lists the paused columns ("transform.column") of
// transforms whose targets t reads, that t reads.
func (e *Engine) PausedUpstream(ctx context.Context, q catalog.Querier, t *catalog.Transform) ([]string, error) {
	all, _, err := e.Cat.Transforms(ctx, q)
	if err != nil {
		return nil, err
	}
	out := []string{}
	sides := []plan.Source{t.Spec.Source}
	reads := [][]string{t.Spec.Reads}
	if j := t.Spec.Join; j != nil {
		sides, reads = append(sides, j.Source), append(reads, j.Source.Reads)
	}
	for _, up := range all {
		for i, s := range sides {
			if up.Target.Schema != s.Schema || up.Target.Name != s.Table {
				continue
			}
			for _, c := range up.Spec.Columns {
				if c.Paused && slices.Contains(reads[i], c.Name) {
					out = append(out, up.Target.Name+"."+c.Name)
				}
			}
		}
	}
	return out, nil
}
