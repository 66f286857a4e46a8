// Package backoff is how background loops wait between attempts: a sleep
// that ends with its context, an exponential backoff, and jitter for idle
// polls.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Sleep waits d, or until ctx ends. It reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	return Wait(ctx, d, nil)
}

// Wait waits d, until ctx ends, or until wake receives (a nil wake never
// does). It reports whether ctx is still live.
func Wait(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C:
	}
	return true
}

// Exponential is a delay that doubles after every failed attempt, from Min
// up to Max, and starts again from Min after a success.
type Exponential struct {
	Min, Max time.Duration
	next     time.Duration
}

// Next returns the delay before the next attempt and doubles the one after.
func (b *Exponential) Next() time.Duration {
	d := max(b.next, b.Min)
	b.next = min(d*2, b.Max)
	return d
}

// Reset makes the next delay Min again.
func (b *Exponential) Reset() { b.next = 0 }

// Jitter returns d plus a random extra of up to a quarter of d, so that
// idle pollers started together spread out.
func Jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d/4)+1))
}
