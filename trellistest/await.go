package trellistest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/backoff"
)

// defaultTimeout is the wait of AwaitLive and Converge given no timeout.
const defaultTimeout = 30 * time.Second

// callLimit bounds one AwaitConverged call of Converge, below
// trellis.CallTimeout so that the call returns its own timeout. Tests
// shorten it.
var callLimit = trellis.CallTimeout - time.Second

// convergeAttempts counts the AwaitConverged calls Converge made; tests
// read it.
var convergeAttempts atomic.Int64

// AwaitLive waits until the transform that writes target ("order_totals"
// or "public.order_totals") is live: built, and applying every committed
// change of its sources. A transform that is catching up (an upstream
// column it reads is paused) is not live yet.
//
// For a target no transform writes it returns a CodeNotFound
// *trellis.Error at once. When timeout passes first (0 means 30 seconds),
// or ctx ends, it returns a CodeTimeout *trellis.Error naming the state the
// transform is in and why (the pause reason, the build's failure, the lock
// its capture waits for, a missing staging worker).
//
// Live means the target has been built; rows written since may still be
// on their way. Converge waits for those.
func AwaitLive(ctx context.Context, c *trellis.Client, target string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	poll := backoff.Exponential{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	for {
		st, err := c.Status(waitCtx, target)
		if err != nil {
			if waitCtx.Err() != nil && ctx.Err() == nil {
				return timeoutError(ctx, c, target, timeout, nil)
			}
			return err
		}
		if st == nil {
			return &trellis.Error{Code: trellis.CodeNotFound, Message: fmt.Sprintf("no transform writes %s", target)}
		}
		if st.State == trellis.StateLive {
			return nil
		}
		if !backoff.Sleep(waitCtx, poll.Next()) {
			return timeoutError(ctx, c, target, timeout, st)
		}
	}
}

// timeoutError is AwaitLive's error when the wait ended first: the last
// status read, described, or a fresh one when there is none.
func timeoutError(ctx context.Context, c *trellis.Client, target string, timeout time.Duration, st *trellis.Status) error {
	if ctx.Err() != nil {
		return &trellis.Error{Code: trellis.CodeTimeout, Message: fmt.Sprintf("waiting for %s to be live: %v", target, ctx.Err())}
	}
	// The caller's context is still good: a short look for the reasons.
	look, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if st == nil {
		st, _ = c.Status(look, target)
		if st == nil {
			return &trellis.Error{Code: trellis.CodeTimeout, Message: fmt.Sprintf("%s was not live within %s", target, timeout)}
		}
	}
	why := describe(st)
	if st.State == trellis.StateWaitingToBackfill || st.State == trellis.StateBackfilling {
		if ok, err := c.HasLiveStagingWorker(look); err == nil && !ok {
			why = append(why, "no staging worker is running for this instance (a client with Options.Staging builds targets)")
		}
	}
	msg := fmt.Sprintf("%s was not live within %s: it is %s", st.Target, timeout, st.State)
	if len(why) > 0 {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	return &trellis.Error{Code: trellis.CodeTimeout, Message: msg}
}

// describe lists what a status says about why a transform is where it is.
func describe(st *trellis.Status) []string {
	var why []string
	if st.PausedReason != "" {
		why = append(why, st.PausedReason)
	}
	if f := st.CaptureFailure; f != nil {
		why = append(why, fmt.Sprintf("%s failure on %s: %s", f.Kind, f.SourceTable, f.Error))
	}
	if f := st.BackfillFailure; f != nil {
		why = append(why, fmt.Sprintf("the build failed %d times, last: %s", f.Attempts, f.LastError))
	}
	if w := st.CaptureWait; w != nil {
		why = append(why, fmt.Sprintf("capture %s on %s waits for a %s lock held by: %s",
			w.Operation, w.Table, w.LockMode, strings.Join(w.Blockers, ", ")))
	}
	if len(st.PausedUpstreamColumns) > 0 {
		why = append(why, "paused upstream columns: "+strings.Join(st.PausedUpstreamColumns, ", "))
	}
	if len(st.BackfillingColumns) > 0 {
		why = append(why, "columns still filling: "+strings.Join(st.BackfillingColumns, ", "))
	}
	for _, n := range st.Correcting {
		why = append(why, "correcting for partition "+n.Node)
	}
	if st.State == trellis.StateBackfilling {
		why = append(why, fmt.Sprintf("%d rows written so far", st.BuildRows))
	}
	if f := st.DrainFailure; f != nil {
		why = append(why, fmt.Sprintf("a page of changes keeps failing (%d attempts): %s", f.Attempts, f.Error))
	}
	return why
}

// Converge takes a watermark (trellis.Client.WatermarkToken) and waits
// until every change committed before the call has reached its targets,
// and the targets of the transforms that read them. Unlike one
// AwaitConverged call, it waits past trellis.CallTimeout: timeout (0 means
// 30 seconds) bounds the whole wait, and ctx can end it sooner. When the
// wait ends first it returns a CodeTimeout *trellis.Error.
//
// It waits for captured changes only: call AwaitLive first for a transform
// defined in the test, whose target may still be building. Some process
// must run drain workers (Options.DrainWorkers), or nothing converges.
func Converge(ctx context.Context, c *trellis.Client, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	deadline := time.Now().Add(timeout)
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	token, err := c.WatermarkToken(waitCtx)
	if err != nil {
		return err
	}
	for {
		wait := min(time.Until(deadline), callLimit)
		if wait <= 0 {
			break
		}
		convergeAttempts.Add(1)
		err := c.AwaitConverged(waitCtx, token, wait)
		if err == nil {
			return nil
		}
		if trellis.CodeOf(err) != trellis.CodeTimeout || ctx.Err() != nil {
			return err
		}
	}
	msg := fmt.Sprintf("changes committed before Converge did not all reach their targets within %s", timeout)
	look, cancelLook := context.WithTimeout(ctx, 5*time.Second)
	defer cancelLook()
	if ok, err := c.HasLiveDrainWorkers(look); err == nil && !ok {
		msg += " (no drain worker is running for this instance: a client with Options.DrainWorkers applies changes)"
	}
	return &trellis.Error{Code: trellis.CodeTimeout, Message: msg}
}
