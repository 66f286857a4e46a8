package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// TestStatusFixes checks that every failure a status can carry is printed
// with what to do, on statuses built by hand (the database tests provoke
// the ones that can be provoked quickly).
func TestStatusFixes(t *testing.T) {
	t.Parallel()
	g := &globals{targetSchema: "public"}
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	now := at.Add(time.Hour)
	state := pgerrcode.CheckViolation
	render := func(st *trellis.Status, cols []trellis.QuarantineEntry, held []trellis.PoisonSample, noDrain bool) string {
		st.Target, st.Since, st.Statement = "public.t", at, "TRANSFORM t FROM src SELECT a AS a"
		if st.State == "" {
			st.State = trellis.StateLive
		}
		var b strings.Builder
		writeStatus(&b, g, st, cols, held, !noDrain, now)
		return b.String()
	}
	for _, tc := range []struct {
		name string
		st   trellis.Status
		cols []trellis.QuarantineEntry
		held []trellis.PoisonSample
		// noDrain: no drain worker of the instance is alive.
		noDrain bool
		want    []string
		not     []string
	}{
		{
			name: "nothing wrong",
			want: []string{"pending:    none\n", "  every committed change of its source is applied\n"},
			not:  []string{"quarantined", "held", "failure", "drain worker"},
		},
		{
			name:    "changes pending, no drain worker",
			st:      trellis.Status{PendingChanges: 499, Lag: 12*time.Second + 400*time.Millisecond},
			noDrain: true,
			want: []string{
				"pending:    499 changes, the oldest waiting up to 12.4s\n",
				"  live, behind by 499 committed changes of its sources not applied yet\n",
				"\nno drain worker is alive\n  nothing applies committed changes to any target until one runs",
			},
			not: []string{"is applied"},
		},
		{
			name: "held keys",
			st:   trellis.Status{HeldKeys: &trellis.HeldKeys{Count: 4, OldestPoisonedAt: at}},
			held: []trellis.PoisonSample{{SrcTable: "public.src", Key: "7", Error: "violates\ncheck constraint"}, {SrcTable: "public.src", Key: "(1,two words)", Error: "x"}},
			want: []string{
				"except what is quarantined below",
				"\nheld keys: 4 keys held since 2024-05-01T12:00:00Z\n",
				"list them with `trellis sample t`, fix the rows, then `trellis release-key t TABLE KEY` for each, or `trellis apply 'RESUME TRANSFORM t'` to release them all\n",
				"  trellis release-key t public.src 7   # violates check constraint\n",
				"  trellis release-key t public.src '(1,two words)'   # x\n",
				"  ... and 2 more\n",
			},
		},
		{
			name: "quarantined and paused columns",
			cols: []trellis.QuarantineEntry{
				{Target: "t.ratio", State: trellis.StatePaused, Since: at, Rows: 3, Error: "division by zero"},
				{Target: "t.other", State: trellis.StatePaused, Since: at},
			},
			want: []string{
				"\nquarantined column: t.ratio since 2024-05-01T12:00:00Z: its expression failed on 3 rows: division by zero\n",
				"list the rows with `trellis sample t.ratio`, fix them",
				"then `trellis apply 'RESUME TRANSFORM t.ratio'` re-derives the column\n",
				"\npaused column: t.other since 2024-05-01T12:00:00Z (PAUSE TRANSFORM)\n",
				"`trellis apply 'RESUME TRANSFORM t.other'` re-derives it\n",
			},
		},
		{
			name: "drain failure",
			st: trellis.Status{DrainFailure: &trellis.DrainFailure{SegSeq: 9, Tables: []string{"public.src"}, Error: "out of\nmemory",
				SQLState: &state, Since: at, LastSeen: at, Attempts: 5}},
			want: []string{
				"\ndrain failure: out of memory (SQLSTATE 23514)\n",
				"has failed 5 times since 2024-05-01T12:00:00Z",
				"retried with backoff and clears once a retry succeeds: fix what the error names",
			},
		},
		{
			name: "capture failure, capture",
			st: trellis.Status{State: trellis.StatePaused, PausedReason: "column gone",
				CaptureFailure: &trellis.CaptureFailure{Kind: trellis.CaptureFailureCapture, SourceTable: "public.src", Error: "column gone", Columns: []string{"a"}, DetectedAt: at}},
			want: []string{
				"\npaused: by the capture failure below\n",
				"\ncapture failure (capture) on public.src (columns a) since 2024-05-01T12:00:00Z: column gone\n",
				"public.src lost a, which the definition reads (a column dropped, or its primary key): add it back on public.src, then `trellis apply 'RESUME TRANSFORM t'`; or DROP TRANSFORM t and define it again without it\n",
			},
		},
		{
			name: "capture failure, halt",
			st: trellis.Status{State: trellis.StatePaused, PausedReason: "halted",
				CaptureFailure: &trellis.CaptureFailure{Kind: trellis.CaptureFailureHalt, SourceTable: "public.t", Error: "halted", DetectedAt: at}},
			want: []string{
				"applying to public.t stopped on the error above, which says what failed (a change made to the target outside Trellis, or a source column, function or type the definition uses): fix that, or DROP TRANSFORM t and define it again; then `trellis apply 'RESUME TRANSFORM t'` (it rebuilds the target)\n",
			},
		},
		{
			name: "capture failure, disruption",
			st: trellis.Status{State: trellis.StatePaused, PausedReason: "trigger disabled",
				CaptureFailure: &trellis.CaptureFailure{Kind: trellis.CaptureFailureDisruption, SourceTable: "public.src", Error: "trigger disabled", DetectedAt: at}},
			want: []string{
				"capture on public.src was disabled, dropped or replaced outside Trellis, so rows written meanwhile never reached the target: `trellis apply 'RESUME TRANSFORM t'` reinstalls capture and rebuilds the target\n",
			},
		},
		{
			name: "capture wait",
			st: trellis.Status{CaptureWait: &trellis.CaptureWait{Operation: "install", Table: "public.src", LockMode: "SHARE ROW EXCLUSIVE",
				Blockers: []string{"pid 42 (app, idle in transaction since 2024-05-01T11:00:00Z): SELECT 1"}, Since: at}},
			want: []string{
				"\ncapture waits for a lock: install on public.src needs SHARE ROW EXCLUSIVE since 2024-05-01T12:00:00Z\n",
				"the wait ends when they finish, or when you cancel them (SELECT pg_cancel_backend(pid); pg_terminate_backend(pid) for one idle in transaction)\n",
				"  blocking: pid 42 (app, idle in transaction since 2024-05-01T11:00:00Z): SELECT 1\n",
			},
		},
		{
			name: "backfill failure, retrying",
			st:   trellis.Status{State: trellis.StateBackfilling, BackfillFailure: &trellis.BackfillFailure{Attempts: 2, LastError: "boom", NextAttemptAt: at}},
			want: []string{
				"\nbackfill failure: 2 attempts, last error: boom\n",
				"the next attempt is at 2024-05-01T12:00:00Z, and repeated failures pause the transform: fix the cause the error names (if it paused, then `trellis apply 'RESUME TRANSFORM t'`)\n",
			},
		},
		{
			name: "backfill failure, paused",
			st: trellis.Status{State: trellis.StatePaused, PausedReason: "its build keeps failing: boom",
				BackfillFailure: &trellis.BackfillFailure{Attempts: 5, LastError: "boom", NextAttemptAt: at}},
			want: []string{
				"\npaused: its build keeps failing: boom\n",
				"what to fix is below",
				"the build kept failing, so the transform paused: fix the cause the error names, then `trellis apply 'RESUME TRANSFORM t'` builds it again\n",
			},
		},
		{
			name: "paused upstream columns and index gaps",
			st: trellis.Status{State: trellis.StateCatchingUp, PausedUpstreamColumns: []string{"up.c"},
				SourceIndexGaps: []trellis.SourceIndexGap{{Table: "public.src", Columns: []string{"g"}, Role: trellis.RoleGroupBy, Fix: "CREATE INDEX ON src (g);"}}},
			want: []string{
				"\npaused upstream columns: up.c\n",
				"  up.c: `trellis sample up.c` lists the rows it failed on, if any; once its cause is fixed, `trellis apply 'RESUME TRANSFORM up.c'`\n",
				"  public.src (g) for group_by: run: CREATE INDEX ON src (g);\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := render(&tc.st, tc.cols, tc.held, tc.noDrain)
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
			for _, n := range tc.not {
				require.NotContains(t, out, n)
			}
		})
	}
}
