package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/backoff"
)

// waitPoll is how often --wait reads the statuses.
var waitPoll = 200 * time.Millisecond

// waitLive waits until every target is live, reporting progress to w, for
// at most timeout. A paused target ends the wait with an error: nothing
// builds it until it is resumed.
func waitLive(ctx context.Context, c *trellis.Client, g *globals, targets []string, timeout time.Duration, w io.Writer) error {
	if len(targets) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := newProgress(w)
	defer p.finish()
	pending := append([]string(nil), targets...)
	for {
		var still []string
		for _, t := range pending {
			st, err := c.Status(ctx, t)
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("%s is not live after %s", g.bareTarget(t), timeout)
				}
				return err
			}
			switch {
			case st == nil:
				return fmt.Errorf("no transform writes %s any more", g.bareTarget(t))
			case st.State == trellis.StateLive:
				p.live(g.bareTarget(t))
			case st.State == trellis.StatePaused:
				return fmt.Errorf("%s is paused: %s (trellis status %s says more)", g.bareTarget(t), oneLine(st.PausedReason, 0), shellWord(g.bareTarget(t)))
			default:
				p.update(g.bareTarget(t), st)
				still = append(still, t)
			}
		}
		if len(still) == 0 {
			return nil
		}
		pending = still
		if !backoff.Sleep(ctx, waitPoll) {
			return fmt.Errorf("%s is not live after %s", g.bareTarget(pending[0]), timeout)
		}
	}
}

// progress reports a wait: a line per change of state or every few
// seconds.
type progress struct {
	w     io.Writer
	last  map[string]string
	shown map[string]time.Time
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, last: map[string]string{}, shown: map[string]time.Time{}}
}

// update reports a target that is not live yet.
func (p *progress) update(name string, st *trellis.Status) {
	line := fmt.Sprintf("%s: %s", name, st.State)
	if st.State == trellis.StateBackfilling {
		line += fmt.Sprintf(", %d rows written", st.BuildRows)
	}
	if line == p.last[name] || (stateOf(p.last[name]) == stateOf(line) && time.Since(p.shown[name]) < 5*time.Second) {
		return
	}
	fmt.Fprintln(p.w, line)
	p.last[name], p.shown[name] = line, time.Now()
}

// live reports a target that is live, once.
func (p *progress) live(name string) {
	if p.last[name] == "live" {
		return
	}
	fmt.Fprintf(p.w, "%s: live\n", name)
	p.last[name] = "live"
}

func (p *progress) finish() {}

// stateOf is the state part of a progress line.
func stateOf(line string) string {
	for i := range len(line) {
		if line[i] == ',' {
			return line[:i]
		}
	}
	return line
}
