package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/pgerr"
	"github.com/trellis-pg/trellis/trellistype"
)

// Page is the unit of work drain workers claim: the ledger rows committed
// in snapshot Hi and not in Lo written by the transactions XLo to XHi.
type Page struct {
	ID     int64
	Lo, Hi string // snapshots, as text
	// XLo and XHi are the first and last transaction ids (xid8, as text)
	// of the page's rows; nil for a page cut by an older release, which
	// holds the rows of its Buckets instead (stored with the row).
	XLo, XHi *string
	Buckets  []int32
	// Segs are the ring segments the page's rows are in (nil: a page cut
	// by an older release, which reads every segment).
	Segs []int32
	// Seg, TLo and THi are set on a page that is a part of one
	// transaction (XLo = XHi), of more rows than a page holds (decision
	// 0042): its rows are those of segment Seg whose ctid is at least TLo
	// and below THi (tids, as text).
	Seg      *int32
	TLo, THi *string
	// Rows is the number of ledger rows Changes read.
	Rows     int
	Attempts int // failed attempts so far
	// Gen is the catalog's generation, read with the claim.
	Gen int64
}

// Change is one changed key of a source: its values, the old values of the
// source's captured columns (nil for a new row), and its bucket, computed
// from the key when the row is read (capture stores none). A nil Key
// is a TRUNCATE of the source: it is re-read. A key may have NULL parts
// (nil elements): legitimately for a source identified by a unique index
// NULLS NOT DISTINCT (a Trellis target read by a chain, decision 0049),
// else only while the table has no key on those columns (see NullPart).
type Change struct {
	Src    int
	Key    []*string
	Vals   []*string
	Bucket int
	// Mislabeled says a row of the change was stored with a bucket that
	// is not its key's (an older capture stored one): Bucket is always the
	// key's own, the one its recomputes serialise on.
	Mislabeled bool
}

// Claim locks, in tx, the next page due (id 0), or the page of that id,
// skipping pages other workers hold. It is nil when there is none.
func (l *Ledger) Claim(ctx context.Context, tx pgx.Tx, id int64) (*Page, error) {
	var p Page
	var err error
	if id != 0 {
		err = tx.QueryRow(ctx, l.Cat.SQL(sqlClaimPage), id).Scan(&p.ID, &p.Lo, &p.Hi, &p.XLo, &p.XHi, &p.Buckets, &p.Segs, &p.Seg, &p.TLo, &p.THi, &p.Attempts, &p.Gen)
	} else {
		err = tx.QueryRow(ctx, l.Cat.SQL(sqlClaim)).Scan(&p.ID, &p.Lo, &p.Hi, &p.XLo, &p.XHi, &p.Buckets, &p.Segs, &p.Seg, &p.TLo, &p.THi, &p.Attempts, &p.Gen)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claiming a page: %w", err)
	}
	return &p, nil
}

// Changes reads a page's changes, each distinct change once. It reads only
// the page's segments: the page's transaction then holds no lock on the
// others, and a drained one can be reclaimed while the page is applied.
//
// The rows are reduced here, not by the statement: its estimate of a
// page's rows is far too low for it to hash them, and sorting arrays of
// text by collation cost more than reading every row did. A row of a key
// with no old values (an inserted row, an updated row's new key) is left
// out when another change of the page has the same key: every change's
// key is looked up as it is now, so it says nothing more.
func (l *Ledger) Changes(ctx context.Context, tx pgx.Tx, p *Page) ([]Change, error) {
	var rows pgx.Rows
	var err error
	if p.TLo != nil && p.THi != nil && p.Seg != nil && p.XLo != nil {
		// A part of one transaction: a range of heap blocks of its segment.
		rows, err = tx.Query(ctx, l.Cat.SQL(sqlPartKeys, segment(int(*p.Seg))),
			p.Lo, p.Hi, Buckets-1, *p.TLo, *p.THi, *p.XLo)
	} else {
		rows, err = tx.Query(ctx, l.Cat.SQL(sqlPageKeys, l.pageSegments(p)), p.Lo, p.Hi, p.Buckets, Buckets-1, p.XLo, p.XHi)
	}
	if err != nil {
		return nil, fmt.Errorf("reading page %d: %w", p.ID, err)
	}
	defer rows.Close()
	var r reducer
	p.Rows = 0
	for rows.Next() {
		var c Change
		if err := pageRow(rows, &c, &c.Key); err != nil {
			return nil, fmt.Errorf("reading page %d: %w", p.ID, err)
		}
		r.add(c)
		p.Rows++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading page %d: %w", p.ID, err)
	}
	return r.changes(), nil
}

// reducer reduces a page's ledger rows to its distinct changes.
type reducer struct {
	out []Change
	// keys holds each change's source and key (appendKeyID), as out
	// holds the change.
	keys []string
	// seen indexes out by source, key and old values; withVals holds,
	// by source and key, the first change of the key with old values.
	seen     map[string]int
	withVals map[string]int
	buf      []byte // the identity being looked up
}

// appendKeyID appends the identity of a change's source and key to b.
func appendKeyID(b []byte, c Change) []byte {
	b = strconv.AppendInt(b, int64(c.Src), 10)
	if c.Key == nil {
		b = append(b, 2) // a TRUNCATE
	}
	return AppendKey(b, c.Key)
}

// AppendKey appends the identity of a key's parts to b: each part is a 0
// (no text holds one), then v and its text, or n for a NULL part, so no
// two keys share an identity.
func AppendKey(b []byte, key []*string) []byte {
	for _, k := range key {
		if k == nil {
			b = append(b, 0, 'n')
			continue
		}
		b = append(b, 0, 'v')
		b = append(b, *k...)
	}
	return b
}

// add adds a row's change, or merges it into the same change added before.
// The maps are looked up with the identity in a reused buffer: a string
// is made only for a change not seen before.
func (r *reducer) add(c Change) {
	if r.seen == nil {
		r.seen, r.withVals = map[string]int{}, map[string]int{}
	}
	b := appendKeyID(r.buf[:0], c)
	nkey := len(b)
	if c.Vals != nil {
		// The old values as the key's parts: a 0, then n for a NULL or v
		// and the text, so no two lists of old values share an identity.
		b = append(b, 1)
		for _, v := range c.Vals {
			if v == nil {
				b = append(b, 0, 'n')
				continue
			}
			b = append(b, 0, 'v')
			b = append(b, *v...)
		}
	}
	r.buf = b
	if i, ok := r.seen[string(b)]; ok {
		r.out[i].Mislabeled = r.out[i].Mislabeled || c.Mislabeled
		return
	}
	id := string(b)
	key := id[:nkey]
	r.seen[id] = len(r.out)
	if c.Vals != nil {
		if _, ok := r.withVals[key]; !ok {
			r.withVals[key] = len(r.out)
		}
	}
	r.out = append(r.out, c)
	r.keys = append(r.keys, key)
}

// changes are the distinct changes added, less the changes without old
// values of a key that has one with them (which carries their label).
func (r *reducer) changes() []Change {
	keep := make([]bool, len(r.out))
	for i, c := range r.out {
		keep[i] = true
		if c.Vals != nil || c.Key == nil {
			continue
		}
		if j, ok := r.withVals[r.keys[i]]; ok {
			keep[i] = false
			r.out[j].Mislabeled = r.out[j].Mislabeled || c.Mislabeled
		}
	}
	out := make([]Change, 0, len(r.out))
	for i, c := range r.out {
		if keep[i] {
			out = append(out, c)
		}
	}
	return out
}

// NullPart reports whether a part of the change's key is NULL. Capture
// records the key columns as they are. Only a source identified by a
// unique index NULLS NOT DISTINCT (decision 0049) has such keys by right;
// on any other a key column holds NULL only while the table has no
// primary key on it (dropped, with its NOT NULL; or the column dropped and
// added again): no key then says which row changed, so its reader re-reads
// the source, and the change never fails its page.
func (c Change) NullPart() bool {
	return slices.Contains(c.Key, nil)
}

// pageSegments is the relation a page's rows are read from: the union of
// its segments, addressed directly, or the whole ledger for a page that
// does not list them.
func (l *Ledger) pageSegments(p *Page) string {
	if p.Segs == nil {
		return l.Cat.SQL(sqlAllSegments)
	}
	parts := make([]string, len(p.Segs))
	for i, s := range p.Segs {
		parts[i] = l.Cat.SQL(sqlSegmentRows, segment(int(s)))
	}
	return "(" + strings.Join(parts, " UNION ALL ") + ")"
}

// Done marks a page applied, in the transaction that applied it.
func (l *Ledger) Done(ctx context.Context, tx pgx.Tx, p *Page) error {
	_, err := tx.Exec(ctx, l.Cat.SQL(sqlPageDone), p.ID)
	return err
}

// Failed records that applying a page failed with cause, on the source
// tables named (for the status of their readers). The page is retried
// after a backoff that doubles with each attempt, from 100 ms to 30 s.
func (l *Ledger) Failed(ctx context.Context, p *Page, cause error, tables []string) error {
	var sqlstate *string
	if c := pgerr.Code(cause); c != "" {
		sqlstate = &c
	}
	delay := min(100*time.Millisecond<<min(p.Attempts, 10), 30*time.Second)
	_, err := l.Pool.Exec(ctx, l.Cat.SQL(sqlPageFailed), p.ID, cause.Error(), sqlstate, tables, delay.Milliseconds())
	return err
}

// InFlight reads the changes of the sources that snapshot sees committed
// and that are not applied yet: past the drained frontier (nil: no cut
// yet), and in no page that is done. Each distinct change comes once.
func (l *Ledger) InFlight(ctx context.Context, q catalog.Querier, sources []int, frontier *string) ([]Change, error) {
	rows, err := q.Query(ctx, l.Cat.SQL(sqlInFlight), sources, frontier)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Change, error) {
		var c Change
		err := r.Scan(&c.Src, &c.Key, &c.Vals)
		return c, err
	})
}

// Restage appends a change of one key of a captured table (named
// schema.table) in tx, as the table's capture would: the drain then
// recomputes the key for every transform reading the table. It reports
// false when the table is not captured.
func (l *Ledger) Restage(ctx context.Context, tx pgx.Tx, table string, key []*string) (bool, error) {
	tag, err := tx.Exec(ctx, l.Cat.SQL(sqlRestage), table, key)
	return tag.RowsAffected() > 0, err
}

// Failing reads the pages that failed and are not done yet holding changes
// of one of the tables (schema.table), oldest first; at most limit of them
// (0: all).
func (l *Ledger) Failing(ctx context.Context, q catalog.Querier, tables []string, limit int) ([]trellistype.DrainFailure, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := q.Query(ctx, l.Cat.SQL(sqlFailing), tables, lim)
	if err != nil {
		return nil, fmt.Errorf("reading drain failures: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[trellistype.DrainFailure])
	if err != nil {
		return nil, fmt.Errorf("reading drain failures: %w", err)
	}
	return out, nil
}
