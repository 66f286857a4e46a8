// Package trellistest helps the test suites of applications that use
// Trellis:
//
//   - NewDatabase gives each test a fresh, empty database on a throwaway
//     PostgreSQL server (or on the server TRELLIS_TEST_DATABASE_URL names),
//     dropped when the test ends;
//   - AwaitLive waits until a transform's target is built, and says what it
//     waits on when it is not;
//   - Converge waits until every write committed so far has reached the
//     targets, so a test can assert on them;
//   - ResumeCaptureDisruptions, after fixtures or bulk data were loaded with
//     triggers disabled, resumes the transforms whose capture that disrupted
//     and waits until their targets have caught up.
package trellistest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/backoff"
)

// ResumeRefused is returned by ResumeCaptureDisruptions when some
// disrupted transforms could not be resumed (a source table that is gone,
// a definition that pauses again). Refused maps each such target
// ("schema.table") to the reason. Every other disrupted transform was
// resumed and waited for.
type ResumeRefused struct {
	Refused map[string]string
}

func (e *ResumeRefused) Error() string {
	targets := make([]string, 0, len(e.Refused))
	for t := range e.Refused {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	parts := make([]string, len(targets))
	for i, t := range targets {
		parts[i] = t + ": " + e.Refused[t]
	}
	return "trellistest: resume refused for " + strings.Join(parts, "; ")
}

// ResumeCaptureDisruptions pauses the readers of every table whose capture
// was disrupted (Client.DetectCaptureDisruptions), resumes only the
// transforms paused for a disruption (an operator's pause, or one for
// another failure, stays), waits until each is live and every write
// committed so far has reached the targets, and returns the resumed
// targets ([] when nothing was disrupted). The client needs its staging
// worker and a drain worker, since resuming rebuilds through them. timeout
// bounds the whole wait (0 means 30 seconds).
func ResumeCaptureDisruptions(ctx context.Context, client *trellis.Client, timeout time.Duration) ([]string, error) {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := client.DetectCaptureDisruptions(ctx); err != nil {
		return nil, err
	}
	defs, err := client.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	resumed := []string{}
	refused := map[string]string{}
	for _, d := range defs {
		if d.State != trellis.StatePaused {
			continue
		}
		st, err := client.Status(ctx, d.Target)
		if err != nil {
			return nil, err
		}
		if st == nil || st.CaptureFailure == nil || st.CaptureFailure.Kind != trellis.CaptureFailureDisruption {
			continue
		}
		if _, err := client.Apply(ctx, "RESUME TRANSFORM "+quoteTarget(d.Target)); err != nil {
			refused[d.Target] = err.Error()
			continue
		}
		resumed = append(resumed, d.Target)
	}
	for _, target := range resumed {
		if err := waitLive(ctx, client, target); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("trellistest: %s did not catch up within %s: %w", target, timeout, err)
			}
			refused[target] = err.Error()
		}
	}
	token, err := client.WatermarkToken(ctx)
	if err != nil {
		return nil, err
	}
	for {
		err := client.AwaitConverged(ctx, token, time.Until(deadline(ctx)))
		if err == nil || trellis.CodeOf(err) != trellis.CodeTimeout || ctx.Err() != nil {
			if err != nil {
				return nil, err
			}
			break
		}
	}
	if len(refused) > 0 {
		live := resumed[:0]
		for _, t := range resumed {
			if _, bad := refused[t]; !bad {
				live = append(live, t)
			}
		}
		return live, &ResumeRefused{Refused: refused}
	}
	return resumed, nil
}

func deadline(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now().Add(30 * time.Second)
	}
	return d
}

// quoteTarget quotes "schema.table" for a statement.
func quoteTarget(target string) string {
	schema, name, _ := strings.Cut(target, ".")
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return q(schema) + "." + q(name)
}

// waitLive polls until target is live; a target that pauses again is an
// error.
func waitLive(ctx context.Context, client *trellis.Client, target string) error {
	for {
		st, err := client.Status(ctx, target)
		if err != nil {
			return err
		}
		switch {
		case st == nil:
			return fmt.Errorf("transform %s was dropped", target)
		case st.State == trellis.StateLive:
			return nil
		case st.State == trellis.StatePaused:
			reason := st.PausedReason
			if st.CaptureFailure != nil {
				reason = st.CaptureFailure.Error
			}
			return fmt.Errorf("paused again: %s", reason)
		}
		if !backoff.Sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}
