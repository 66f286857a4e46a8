package ledger

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Cut pacing (decision 0024): the busier the ledger, the longer idle
// workers let changes gather before they cut, so that a page's fixed cost
// (its claim, cut, key locks, catalog rows and transaction) is shared by
// more changes. A quiet ledger is cut every MinCutInterval, so a lone
// change waits little.
const (
	// MaxCutInterval is the longest an idle worker lets changes gather.
	MaxCutInterval = 50 * time.Millisecond
	// QuietRate is the write rate, in ledger rows per second, up to which
	// idle workers cut every MinCutInterval. Above it the interval grows
	// with the rate (twice the rate, twice the interval), up to
	// MaxCutInterval at 2,000 rows/s: 500 writes/s are cut every 12.5 ms.
	QuietRate = 200
)

// pacer estimates the ledger's write rate from the cuts this process
// takes.
type pacer struct {
	mu   sync.Mutex
	rate float64 // ledger rows per second, smoothed over the last cuts
	// The worker that sleeps until the next cut is due, and until when:
	// the process's other workers poll meanwhile (see WaitForCut).
	waiter int
	until  time.Time
}

// WaitForCut says whether worker (an id unique in the process) is the one
// to wake when the next cut is due, in: one worker of a process paces the
// cuts, the others need not wake with it (they would find nothing to do).
func (l *Ledger) WaitForCut(worker int, in time.Duration) bool {
	p := &l.pace
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiter != worker && now.Before(p.until) {
		return false
	}
	p.waiter, p.until = worker, now.Add(in+MinCutInterval)
	return true
}

// observe records a cut of rows that gathered over since.
func (p *pacer) observe(rows int64, since time.Duration) {
	if since <= 0 {
		return
	}
	r := float64(rows) / since.Seconds()
	p.mu.Lock()
	p.rate = (p.rate + r) / 2
	p.mu.Unlock()
}

// interval is the least time between two cuts at the rate last seen.
func (p *pacer) interval() time.Duration {
	p.mu.Lock()
	r := p.rate
	p.mu.Unlock()
	return CutInterval(r)
}

// CutInterval is the least time idle workers leave between two cuts when
// rows are appended to the ledger at rate rows per second.
func CutInterval(rate float64) time.Duration {
	d := time.Duration(float64(MinCutInterval) * rate / QuietRate)
	return min(max(d, MinCutInterval), MaxCutInterval)
}

// Outlook is what an idle worker needs to know to choose between claiming,
// cutting and sleeping, read in one statement.
type Outlook struct {
	// PagesDue counts the pages not done and not waiting for a retry
	// (other workers may hold some).
	PagesDue int
	// NewRows says rows were committed since the last cut.
	NewRows bool
	// CutIn is how long until a cut is due (0: now); it is only
	// meaningful with NewRows.
	CutIn time.Duration
}

// Look reads the outlook: an idle worker's one statement per poll.
func (l *Ledger) Look(ctx context.Context) (Outlook, error) {
	var o Outlook
	var ageMS float64
	if err := l.Pool.QueryRow(ctx, l.Cat.SQL(sqlOutlook)).Scan(&o.PagesDue, &ageMS, &o.NewRows); err != nil {
		return o, fmt.Errorf("looking for work: %w", err)
	}
	age := time.Duration(ageMS * float64(time.Millisecond))
	o.CutIn = max(0, l.pace.interval()-age)
	return o, nil
}
