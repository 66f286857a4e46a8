package recompute

import (
	"context"
	"fmt"
	"maps"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/plan"
	"github.com/trellis-pg/trellis/trellistype"
)

// Set is what one transaction recomputes of one transform: a set of its
// target keys (source keys, FROM keys or groups), or with Resync the whole
// target.
type Set struct {
	T      *catalog.Transform
	Plan   *plan.Plan // T's plan; a diagnosis pauses the columns it quarantines
	Resync bool       // recompute the whole target (a TRUNCATE of a source)

	skip    bool                 // an initial build has not begun: it will read everything
	upTo    []string             // an initial build's cursor: keys past it are the build's
	keys    map[string][]*string // by their text
	buckets map[int]bool
	// shared is set while keys and buckets are those of a Keys that
	// other sets share (read only): the set's first change copies them.
	shared *Keys
}

// Keys are the changed keys of one source on a page, shared by the sets of
// every transform that recomputes exactly those keys (a projection, a
// join's FROM side: ChangedKeysOnly): the set, its sorted list and the
// rendered statement parameters are made once for all of them, not once a
// transform (decision 0059).
type Keys struct {
	keys    map[string][]*string
	buckets map[int]bool
	list    [][]*string
	cols    map[int][]any // rendered key parameters, by their number
}

// NewKeys are the distinct keys of changes, with their buckets.
func NewKeys(changes []ledger.Change) *Keys {
	k := &Keys{keys: make(map[string][]*string, len(changes)), buckets: map[int]bool{}, cols: map[int][]any{}}
	for _, c := range changes {
		k.keys[string(ledger.AppendKey(nil, c.Key))] = c.Key
		k.buckets[c.Bucket] = true
	}
	k.list = sortedKeys(k.keys)
	return k
}

// params are the key parameters of the list for a plan taking n of them.
func (k *Keys) params(n int) []any {
	if p, ok := k.cols[n]; ok {
		return p
	}
	p := keyColumns(k.list, n)
	k.cols[n] = p
	return p
}

// AddKeys adds keys to the set: an empty set shares them.
func (wk *Set) AddKeys(k *Keys) {
	if len(wk.keys) == 0 && len(wk.buckets) == 0 {
		wk.keys, wk.buckets, wk.shared = k.keys, k.buckets, k
		return
	}
	wk.own()
	for id, key := range k.keys {
		wk.keys[id] = key
	}
	for b := range k.buckets {
		wk.buckets[b] = true
	}
}

// own makes the set's keys its own before it changes them.
func (wk *Set) own() {
	if wk.shared == nil {
		return
	}
	wk.keys, wk.buckets, wk.shared = maps.Clone(wk.keys), maps.Clone(wk.buckets), nil
}

// NewSet is an empty set of keys of t, under t's plan.
func NewSet(t *catalog.Transform) *Set {
	return &Set{T: t, Plan: t.Plan(), keys: map[string][]*string{}, buckets: map[int]bool{}}
}

// Len is how many keys the set holds.
func (wk *Set) Len() int { return len(wk.keys) }

// Locks are the key locks applying the set takes: its keys' buckets, or
// every bucket for a whole-target recompute.
func (wk *Set) Locks(schema string) []int64 {
	var keys []int64
	if wk.Resync {
		for b := 0; b < ledger.Buckets; b++ {
			keys = append(keys, locks.Key(schema, wk.T.ID, b))
		}
		return keys
	}
	for b := range wk.buckets {
		keys = append(keys, locks.Key(schema, wk.T.ID, b))
	}
	return keys
}

// Add adds a key, in the bucket its ledger row (or affected-keys query) gave.
func (wk *Set) Add(key []*string, bucket int) {
	wk.own()
	wk.keys[string(ledger.AppendKey(nil, key))] = key
	wk.buckets[bucket] = true
}

// wholeKey is the key of a global aggregate's one group.
func wholeKey() []*string {
	k := plan.GlobalKeyText
	return []*string{&k}
}

// whole makes the keys of a global aggregate kept through partials (the
// ranges of its changed source keys) its one group's key, which stands
// for every range: a page that fails is diagnosed, quarantined and held
// as the one group, as without partials.
func (wk *Set) whole() {
	if !wk.Plan.Partial() || len(wk.keys) == 0 {
		return
	}
	wk.own()
	clear(wk.keys)
	k := wholeKey()
	wk.keys[string(ledger.AppendKey(nil, k))] = k
}

// keyList is the work's keys, in a stable order.
func (wk *Set) keyList() [][]*string {
	if wk.shared != nil {
		return wk.shared.list
	}
	return sortedKeys(wk.keys)
}

// sortedKeys are the keys of a set, in the order of their identities.
func sortedKeys(keys map[string][]*string) [][]*string {
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([][]*string, len(ids))
	for i, id := range ids {
		out[i] = keys[id]
	}
	return out
}

// clearKeys empties the set.
func (wk *Set) clearKeys() {
	wk.own()
	clear(wk.keys)
}

// nKeyParams is how many key columns (one text[] parameter each) the
// keyed statements of the work's plan take.
func (wk *Set) nKeyParams() int { return wk.Plan.KeyParams() }

// keyedStatements are the statements recomputing a set of keys under pl;
// their parameters are nKeyParams text[] (the keys, column by column), then
// the bound (an initial build's cursor).
func (wk *Set) keyedStatements(pl *plan.Plan, keys [][]*string) []string {
	switch pl.Kind() {
	case plan.KindProjection:
		return []string{pl.Recompute(wk.upTo != nil)}
	case plan.KindJoin:
		return pl.RecomputeJoinKeys()
	}
	return pl.RecomputeGroups(hasNull(keys))
}

// keyedArgs are the parameters of keyedStatements for keys.
func (wk *Set) keyedArgs(keys [][]*string) []any {
	return wk.withBound(keyColumns(keys, wk.nKeyParams()))
}

// allArgs are the parameters of keyedStatements for the whole set, as
// keyList lists it: rendered once for the transforms sharing the keys.
func (wk *Set) allArgs(keys [][]*string) []any {
	if wk.shared != nil {
		return wk.withBound(wk.shared.params(wk.nKeyParams()))
	}
	return wk.keyedArgs(keys)
}

// withBound are the key parameters cols, then the bound.
func (wk *Set) withBound(cols []any) []any {
	args := make([]any, 0, len(cols)+len(wk.upTo))
	args = append(args, cols...)
	for _, v := range wk.upTo {
		args = append(args, v)
	}
	return args
}

// keyColumns are the first n parts of keys, column by column, each an
// array literal (arrayLiteral): a string parameter is sent as it is, so
// the keys shared by several transforms' statements are rendered once,
// not encoded again for each.
func keyColumns(keys [][]*string, n int) []any {
	cols := make([]any, n)
	var b []byte
	for i := range n {
		b = b[:0]
		b = append(b, '{')
		for j, k := range keys {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendArrayElement(b, k[i])
		}
		b = append(b, '}')
		cols[i] = string(b)
	}
	return cols
}

// appendArrayElement appends an element of an array literal: NULL, or the
// text quoted (a backslash before each quote and backslash), which every
// element type's input function reads as the text itself.
func appendArrayElement(b []byte, v *string) []byte {
	if v == nil {
		return append(b, "NULL"...)
	}
	b = append(b, '"')
	for i := 0; i < len(*v); i++ {
		if c := (*v)[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, (*v)[i])
	}
	return append(b, '"')
}

// apply recomputes the work's keys (or the whole target) under its plan.
func (wk *Set) apply(ctx context.Context, tx pgx.Tx) error {
	pl := wk.Plan
	if wk.skip {
		return nil
	}
	var stmts []string
	var args []any
	switch {
	case wk.Resync && pl.Kind() == plan.KindProjection:
		stmts = []string{pl.Resync(wk.upTo != nil)}
		for _, v := range wk.upTo {
			args = append(args, v)
		}
	case wk.Resync:
		stmts = pl.ShapeResync()
	case len(wk.keys) == 0:
		return nil
	default:
		keys := wk.keyList()
		stmts = wk.keyedStatements(pl, keys)
		args = wk.allArgs(keys)
	}
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("applying %d keys to %s: %w", len(wk.keys), wk.T.Target, err)
		}
	}
	return nil
}

// buildBound reads, under the key locks, whether a projection is in its
// initial build: the build inserts the keys past its cursor itself, so the
// drain leaves them alone (and everything, before the build has begun).
func (a *applier) buildBound(ctx context.Context, tx pgx.Tx, wk *Set) error {
	if wk.Plan.Kind() != plan.KindProjection || (wk.T.State != trellistype.StateWaitingToBackfill && wk.T.State != trellistype.StateBackfilling) {
		return nil
	}
	var state trellistype.State
	var kind string
	var cursor []string
	if err := tx.QueryRow(ctx, a.r.Cat.SQL(sqlBuildState), wk.T.ID).Scan(&state, &kind, &cursor); err != nil {
		return fmt.Errorf("reading the build state of %s: %w", wk.T.Target, err)
	}
	if kind != "initial" || (state != trellistype.StateWaitingToBackfill && state != trellistype.StateBackfilling) {
		return nil
	}
	if cursor == nil {
		wk.skip = true
		return nil
	}
	wk.upTo = cursor
	return nil
}
