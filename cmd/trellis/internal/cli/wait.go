package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
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

// progress reports a wait. On a terminal, one line per target that is
// redrawn in place: a bar of rows done of the estimated total, the rate
// and the time left. Otherwise plain lines: one per change of state, and
// while a build runs one every progressEvery with the same figures.
type progress struct {
	w     io.Writer
	tty   bool
	last  map[string]string    // the last line shown per target
	shown map[string]time.Time // when it was shown
	first map[string]sample    // the first rows seen of a build
	drawn bool                 // a terminal line is open
	now   func() time.Time
}

// sample is a build's rows at a time.
type sample struct {
	rows int64
	at   time.Time
}

// progressEvery is how often plain progress lines repeat a build's figures.
var progressEvery = 5 * time.Second

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w), last: map[string]string{}, shown: map[string]time.Time{}, first: map[string]sample{}, now: time.Now}
}

// update reports a target that is not live yet.
func (p *progress) update(name string, st *trellis.Status) {
	now := p.now()
	var rate float64
	if st.State == trellis.StateBackfilling {
		f, ok := p.first[name]
		if !ok {
			p.first[name] = sample{st.BuildRows, now}
		} else if dt := now.Sub(f.at).Seconds(); dt > 0 {
			rate = float64(st.BuildRows-f.rows) / dt
		}
	}
	line := progressLine(name, st, rate)
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.drawn = true
		return
	}
	if line == p.last[name] || (stateOf(p.last[name]) == stateOf(line) && now.Sub(p.shown[name]) < progressEvery) {
		return
	}
	fmt.Fprintln(p.w, line)
	p.last[name], p.shown[name] = line, now
}

// progressLine is a target's progress: its state, and for a build the rows
// done of the estimated total, a bar, the rate and the time left when they
// are known.
func progressLine(name string, st *trellis.Status, rate float64) string {
	line := fmt.Sprintf("%s: %s", name, st.State)
	if st.State != trellis.StateBackfilling {
		return line
	}
	if st.BuildTotal > 0 {
		done := min(float64(st.BuildRows)/float64(st.BuildTotal), 1)
		const width = 20
		bar := strings.Repeat("#", int(done*width)) + strings.Repeat(".", width-int(done*width))
		line += fmt.Sprintf(", [%s] %d of ~%d rows (%d%%)", bar, st.BuildRows, st.BuildTotal, int(done*100))
	} else {
		line += fmt.Sprintf(", %d rows", st.BuildRows)
	}
	if rate > 0 {
		line += fmt.Sprintf(", %.0f rows/s", rate)
		if left := st.BuildTotal - st.BuildRows; st.BuildTotal > 0 && left > 0 {
			line += ", about " + time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second).String() + " left"
		}
	}
	return line
}

// live reports a target that is live, once.
func (p *progress) live(name string) {
	if p.last[name] == "live" {
		return
	}
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
	fmt.Fprintf(p.w, "%s: live\n", name)
	p.last[name] = "live"
}

// finish ends an open terminal line.
func (p *progress) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

// stateOf is the state part of a progress line.
func stateOf(line string) string {
	state, _, _ := strings.Cut(line, ",")
	return state
}
