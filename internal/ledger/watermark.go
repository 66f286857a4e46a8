package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/catalog"
)

// Snapshot is the current snapshot of committed transactions, as text: a
// watermark token. Every change committed before it is visible in it.
func Snapshot(ctx context.Context, q catalog.Querier) (string, error) {
	var s string
	err := q.QueryRow(ctx, sqlSnapshot).Scan(&s)
	return s, err
}

// Frontier is the drained frontier: the newest cut whose pages, and those
// of every older cut, are done. Every ledger row visible in its snapshot
// has been applied.
type Frontier struct {
	Cut  int64  // the cut's number
	Snap string // the cut's snapshot, as text
}

// DrainedFrontier reads the drained frontier. It is pgx.ErrNoRows when the
// ledger has no cut.
func (l *Ledger) DrainedFrontier(ctx context.Context, q catalog.Querier) (Frontier, error) {
	var f Frontier
	err := q.QueryRow(ctx, l.Cat.SQL(sqlFrontier)).Scan(&f.Cut, &f.Snap)
	return f, err
}

// Converged waits until every change committed in token has been applied,
// then, rounds-1 more times, every change committed by the time the last
// round ended (a change applied to a target that another transform reads
// reaches that one's target a round later). With sources, only changes of
// those source ids count; nil counts all. A round whose token no cut
// covers yet forces one. It polls with backoff, and on every wake-up.
func (l *Ledger) Converged(ctx context.Context, token string, rounds int, sources []int, wake <-chan struct{}) error {
	for r := 0; r < rounds; r++ {
		if err := l.awaitRound(ctx, token, sources, wake); err != nil {
			return err
		}
		if r+1 < rounds {
			var err error
			if token, err = Snapshot(ctx, l.Pool); err != nil {
				return err
			}
		}
	}
	return nil
}

// awaitRound waits until no page up to the oldest cut covering token that
// holds changes (of sources, when given) is left to apply.
func (l *Ledger) awaitRound(ctx context.Context, token string, sources []int, wake <-chan struct{}) error {
	poll := backoff.Exponential{Min: 2 * time.Millisecond, Max: 50 * time.Millisecond}
	for {
		var n int64
		err := l.Pool.QueryRow(ctx, l.Cat.SQL(sqlCovering), token).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := l.Cut(ctx, true); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the cut covering a watermark: %w", err)
		}
		var pending bool
		if sources == nil {
			err = l.Pool.QueryRow(ctx, l.Cat.SQL(sqlPagesPending), n).Scan(&pending)
		} else {
			err = l.Pool.QueryRow(ctx, l.Cat.SQL(sqlSourcesPending), n, sources).Scan(&pending)
		}
		if err != nil {
			return fmt.Errorf("reading the pages left to apply: %w", err)
		}
		if !pending {
			return nil
		}
		if !backoff.Wait(ctx, poll.Next(), wake) {
			return ctx.Err()
		}
	}
}
