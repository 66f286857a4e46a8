package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/locks"
)

// Cut closes the ledger rows committed since the last cut into pages, each
// the rows of a range of transactions (decision 0036). With
// force it records a cut even when there are no new rows (a watermark wait
// needs one covering its snapshot) and waits for a concurrent cutter. It
// returns the number of pages created.
func (l *Ledger) Cut(ctx context.Context, force bool) (int, error) {
	return l.cut(ctx, force, 0)
}

// Tick cuts like an idle worker, and records a cut even with no new rows
// when the last one is older than every. The staging worker ticks, so that
// consecutive cuts are at most about every apart while it runs: the time
// a pending change has waited (Status.Lag) is then known that finely, also
// when no drain worker runs or the ledger was idle for long.
func (l *Ledger) Tick(ctx context.Context, every time.Duration) (int, error) {
	return l.cut(ctx, false, every)
}

func (l *Ledger) cut(ctx context.Context, force bool, emptyAfter time.Duration) (int, error) {
	tx, err := l.Pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if force {
		if err := locks.Cut(ctx, tx, l.Cat.Schema); err != nil {
			return 0, err
		}
	} else if ok, err := locks.TryCut(ctx, tx, l.Cat.Schema); err != nil || !ok {
		return 0, err
	}
	var lo, hi string
	var ageMS float64
	if err := tx.QueryRow(ctx, l.Cat.SQL(sqlLastCutAndSnapshot)).Scan(&lo, &ageMS, &hi); err != nil {
		return 0, fmt.Errorf("reading the last cut: %w", err)
	}
	age := time.Duration(ageMS * float64(time.Millisecond))
	if !force && age < l.pace.interval() {
		return 0, nil // let changes gather into fewer, larger pages
	}
	// The new rows, gathered by transaction into pages of about
	// PageTarget rows. Each page lists the segments its rows are in: the
	// count saw every row committed in hi, so no other segment holds one
	// of the page's.
	rows, err := tx.Query(ctx, l.Cat.SQL(sqlCutPages), lo, hi, int64(PageTarget))
	if err != nil {
		return 0, fmt.Errorf("counting new ledger rows: %w", err)
	}
	var ps []cutPage
	var big []int // the indexes in ps of transactions to split into parts
	var total int64
	for rows.Next() {
		var p cutPage
		var n int64
		var mask int32
		var isBig bool
		if err := rows.Scan(&p.xlo, &p.xhi, &n, &mask, &isBig); err != nil {
			rows.Close()
			return 0, fmt.Errorf("counting new ledger rows: %w", err)
		}
		p.segs = intArray(segmentsOf(mask))
		if isBig && n > PageMax {
			big = append(big, len(ps))
		}
		ps = append(ps, p)
		total += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("counting new ledger rows: %w", err)
	}
	if len(big) > 0 {
		if ps, err = l.splitTransactions(ctx, tx, ps, big); err != nil {
			return 0, err
		}
	}
	if total == 0 && !force && (emptyAfter <= 0 || ageMS < float64(emptyAfter.Milliseconds())) {
		return 0, nil
	}
	xlos, xhis, segments := make([]string, len(ps)), make([]string, len(ps)), make([]string, len(ps))
	seg, tlo, thi := make([]*int32, len(ps)), make([]*string, len(ps)), make([]*string, len(ps))
	for i, p := range ps {
		xlos[i], xhis[i], segments[i], seg[i], tlo[i], thi[i] = p.xlo, p.xhi, p.segs, p.seg, p.tlo, p.thi
	}
	if _, err := tx.Exec(ctx, l.Cat.SQL(sqlInsertCutAndPages), hi, lo, xlos, xhis, segments, seg, tlo, thi); err != nil {
		return 0, fmt.Errorf("recording a cut: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	l.pace.observe(total, age)
	return len(ps), nil
}

// cutPage is a page of a cut being made: its xid range and its segments
// (an array literal); for a part of one transaction, also its segment and
// the bounds of its rows' ctids (tlo inclusive, thi exclusive).
type cutPage struct {
	xlo, xhi, segs string
	seg            *int32
	tlo, thi       *string
}

// splitTransactions replaces each page of ps at an index of big, the rows
// of one transaction of more than PageMax rows, by pages of consecutive
// heap blocks of one segment of at most PageMax rows each (decision 0042):
// a page's changes are held in memory while it is applied, so no page may
// grow with a transaction. The ledger's rows are never updated, so a row's
// ctid stays until its segment is reclaimed, which needs every page of the
// row's cut done.
func (l *Ledger) splitTransactions(ctx context.Context, tx pgx.Tx, ps []cutPage, big []int) ([]cutPage, error) {
	out := make([]cutPage, 0, len(ps)+len(big)*4)
	next := 0
	for _, b := range big {
		out = append(out, ps[next:b]...)
		next = b + 1
		xid := ps[b].xlo
		rows, err := tx.Query(ctx, l.Cat.SQL(sqlSplitTransaction), xid)
		if err != nil {
			return nil, fmt.Errorf("splitting transaction %s into pages: %w", xid, err)
		}
		var blocks []txBlock
		for rows.Next() {
			var k txBlock
			if err := rows.Scan(&k.seg, &k.blk, &k.n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("splitting transaction %s into pages: %w", xid, err)
			}
			blocks = append(blocks, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("splitting transaction %s into pages: %w", xid, err)
		}
		for _, part := range packBlocks(blocks, PageMax) {
			seg := part.seg
			tlo, thi := fmt.Sprintf("(%d,0)", part.from), fmt.Sprintf("(%d,0)", part.to)
			out = append(out, cutPage{xlo: xid, xhi: xid, segs: intArray([]int32{seg}), seg: &seg, tlo: &tlo, thi: &thi})
		}
	}
	return append(out, ps[next:]...), nil
}

// txBlock is the count of one transaction's rows in a heap block of a
// segment.
type txBlock struct {
	seg int32
	blk int64
	n   int64
}

// blockRange is a part of a transaction's rows: those in blocks from to
// to-1 of segment seg.
type blockRange struct {
	seg      int32
	from, to int64
}

// packBlocks packs a transaction's blocks (ordered by segment and block)
// into ranges of consecutive blocks of one segment holding at most limit
// rows each (a block of more rows than limit, which a heap block never
// holds, would be a range of its own).
func packBlocks(blocks []txBlock, limit int64) []blockRange {
	var out []blockRange
	var n int64
	for i, b := range blocks {
		if i == 0 || b.seg != blocks[i-1].seg || n+b.n > limit {
			if i > 0 {
				out[len(out)-1].to = blocks[i-1].blk + 1
			}
			out = append(out, blockRange{seg: b.seg, from: b.blk})
			n = 0
		}
		n += b.n
	}
	if len(out) > 0 {
		out[len(out)-1].to = blocks[len(blocks)-1].blk + 1
	}
	return out
}

// segmentsOf lists the segments whose bits mask sets, in order.
func segmentsOf(mask int32) []int32 {
	var out []int32
	for s := int32(0); s < 31; s++ {
		if mask&(1<<s) != 0 {
			out = append(out, s)
		}
	}
	return out
}

// intArray is an int array's literal ({1,2,3}).
func intArray(xs []int32) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(x)))
	}
	b.WriteByte('}')
	return b.String()
}
