package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	var xlos, xhis, segments []string
	var total int64
	for rows.Next() {
		var xlo, xhi string
		var n int64
		var mask int32
		if err := rows.Scan(&xlo, &xhi, &n, &mask); err != nil {
			rows.Close()
			return 0, fmt.Errorf("counting new ledger rows: %w", err)
		}
		xlos, xhis, segments = append(xlos, xlo), append(xhis, xhi), append(segments, intArray(segmentsOf(mask)))
		total += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("counting new ledger rows: %w", err)
	}
	if total == 0 && !force && (emptyAfter <= 0 || ageMS < float64(emptyAfter.Milliseconds())) {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, l.Cat.SQL(sqlInsertCutAndPages), hi, lo, xlos, xhis, segments); err != nil {
		return 0, fmt.Errorf("recording a cut: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	l.pace.observe(total, age)
	return len(xlos), nil
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
