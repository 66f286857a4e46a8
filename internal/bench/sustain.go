package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-pg/trellis/internal/ledger"
)

// Parameters of the sustain benchmark.
const (
	// DefaultSustainRate is the sustain benchmark's write rate when
	// Options.Rate is 0 (issue 13: 1,000 writes/s).
	DefaultSustainRate = 1000
	sustainSample      = time.Second // how often the ledger and the ring are read
	sustainReports     = 20          // progress lines over the run (at most one a sample)
	sustainWindow      = time.Minute // the span of each figure of the series (sustain/minute-N)
)

// sustain writes at a steady rate (Options.Rate, default 1,000 writes/s)
// for Options.Duration with capture and 2 drain workers running in this
// process, and samples every second the rows of each ledger segment, the
// pages not done, the ring's rotations, and this process's resident memory
// and Go heap (the workers run here; the writers too, and they hold no
// growing state). It reports the largest ledger in seconds of writes, the
// longest a segment held rows (since it was last seen empty) and how long
// past its period a segment the ring had left still held rows (reclaim
// lagging), resident memory at the start, its largest and at the end, the
// Go heap's growth from the first tenth of the run to its end, and a
// series of these per minute (sustain/minute-N): the ledger must stay
// bounded by a few seconds of writes (segments reclaimed while pages are
// in flight), and a worker's memory flat.
func (s *suite) sustain(ctx context.Context, e *env) ([]Result, error) {
	rows := s.opts.Rows
	if err := e.createSource(ctx, rows); err != nil {
		return nil, err
	}
	src := e.table("bench_src")
	ws, err := newWriters(ctx, e.url, src, rows)
	if err != nil {
		return nil, err
	}
	defer ws.close()
	ws.rate = s.opts.Rate
	if ws.rate == 0 {
		ws.rate = DefaultSustainRate
	}
	c, err := e.connect(ctx, true, drainWorkers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	if _, err := e.define(ctx, c); err != nil {
		return nil, err
	}
	stmts, err := e.newStatements(ctx)
	if err != nil {
		return nil, err
	}
	stmts.reset(ctx)

	var samples []sample
	// The ring turns with the clock (ledger.SegmentAt): a rotation is
	// the segment writers append to moving on.
	firstTurn := int64(-1)
	var ring ringWatch
	sampleSQL := sustainSampleSQL(e.catalog)
	read := func(at time.Duration) error {
		var sm sample
		var epoch float64
		dest := []any{&sm.pending, &epoch, &sm.appended}
		for i := range sm.segs {
			dest = append(dest, &sm.segs[i])
		}
		if err := e.pool.QueryRow(ctx, sampleSQL).Scan(dest...); err != nil {
			return fmt.Errorf("sampling the ledger: %w", err)
		}
		turn := int64(math.Round(epoch)) / int64(ledger.SegmentPeriod/time.Second)
		if firstTurn < 0 {
			firstTurn = turn
		}
		for _, n := range sm.segs {
			sm.ledger += n
		}
		sm.held, sm.past = ring.observe(epoch, sm.segs)
		sm.at, sm.rotations, sm.rss, sm.heap = at, int(turn-firstTurn), selfRSS(), liveHeap()
		samples = append(samples, sm)
		return nil
	}
	// The source's rows and the parser's warm-up (define) leave garbage:
	// the run starts from a collected heap, returned to the system, so
	// that resident memory at the start is the workers' and writers' own.
	debug.FreeOSMemory()
	if err := read(0); err != nil {
		return nil, err
	}
	e.logf("writing %.0f writes/s for %s (a line every %s)", ws.rate, s.opts.Duration, max(sustainSample, s.opts.Duration/sustainReports).Round(time.Second))
	m := e.startMeter(ctx)
	type outcome struct {
		n   int64
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		_, n, err := ws.run(ctx, s.opts.Duration)
		done <- outcome{n, err}
	}()
	begin := time.Now()
	every := max(1, int(s.opts.Duration/sustainReports/sustainSample))
	var out outcome
	tick := time.NewTicker(sustainSample)
	defer tick.Stop()
	for running := true; running; {
		select {
		case out = <-done:
			running = false
		case <-tick.C:
		}
		if err := read(time.Since(begin)); err != nil {
			return nil, err
		}
		if sm := samples[len(samples)-1]; len(samples)%every == 0 || !running {
			e.logf("%6s: ledger %7d rows (segments %v), %3d pages pending, %3d rotations, a segment held rows %4.1f s (%4.1f s past its period), RSS %6.1f MB, Go heap %6.1f MB",
				sm.at.Round(time.Second), sm.ledger, sm.segs, sm.pending, sm.rotations, sm.held, sm.past, mb(sm.rss), mb(sm.heap))
		}
	}
	if out.err != nil {
		return nil, out.err
	}
	runtime.GC()
	if err := read(time.Since(begin)); err != nil {
		return nil, err
	}
	lag, err := e.catchUp(ctx, c, max(catchUpMin, s.opts.Duration), "after the sustained writes")
	if err != nil {
		return nil, err
	}
	cpu := m.perChange(ctx, float64(out.n))
	stmts.report(ctx, "the sustained writes", float64(out.n))
	if bad, err := e.mismatches(ctx); err != nil {
		return nil, err
	} else if bad != 0 {
		return nil, fmt.Errorf("after the sustained writes %d target rows differ from the definition's result", bad)
	}

	// The steady part: from a tenth of the run on (the first rotations and
	// the heap's growth to its working size are the warm-up).
	steady := samples[len(samples)/10:]
	rate := float64(out.n) / s.opts.Duration.Seconds()
	st, all := summarize(steady), summarize(samples)
	first, last := steady[0], samples[len(samples)-1]
	// The ledger's size in seconds of writes: against the rows appended
	// per second (an UPDATE appends more than one), as the server's
	// statistics count them; they trail by up to a second, so a run too
	// short to have any counted is compared with the writes per second.
	per, perWhat := rate, "writes per second"
	if appended := float64(last.appended - samples[0].appended); appended > 0 {
		per = appended / s.opts.Duration.Seconds()
		perWhat = fmt.Sprintf("ledger rows appended per second (%.2f a write at %.0f writes/s)", per/rate, rate)
	}
	res := []Result{
		result("sustain/ledger", per, float64(st.ledger), "rows",
			fmt.Sprintf("largest ledger over the steady run vs %s (ratio: seconds of writes held); mean %.0f rows; largest segment %d rows; %d ring rotations in %s; drain %s; %.0f µs CPU per write, every process",
				perWhat, st.meanLedger, st.segment, last.rotations, s.opts.Duration, lag, cpu)),
		result("sustain/segments", ledger.SegmentPeriod.Seconds(), max(all.held, sustainSample.Seconds()), "s",
			fmt.Sprintf("longest a segment held rows since it was last seen empty (sampled every %s, so up to that much more) vs the period it is current (ratio: periods); longest a segment the ring had left held rows past its period: %.1f s (the ring comes back to it %.0f s after)",
				sustainSample, all.past, (ledger.SegmentPeriod*(ledger.Segments-1)).Seconds())),
		result("sustain/rss", mb(samples[0].rss), mb(all.rss), "MB",
			fmt.Sprintf("this process's resident memory (2 drain workers, the writers): at the start vs the largest sampled; %.1f MB at the end", mb(last.rss))),
		result("sustain/heap", mb(first.heap), mb(last.heap), "MB",
			fmt.Sprintf("this process's live Go heap (2 drain workers, the writers) at %s and at the end, after a GC; resident memory %.1f -> %.1f MB", first.at.Round(time.Second), mb(first.rss), mb(last.rss))),
	}
	// The series: one figure per window of the run.
	window := min(sustainWindow, s.opts.Duration)
	for i, w := range windows(samples, window, s.opts.Duration) {
		m := summarize(w)
		res = append(res, result(fmt.Sprintf("sustain/minute-%d", i+1), per, float64(max(m.ledger, 1)), "rows",
			fmt.Sprintf("%s to %s: largest ledger vs rows appended per second as sustain/ledger (ratio: seconds of writes held), mean %.0f, largest segment %d; a segment held rows up to %.1f s (%.1f s past its period); pages pending up to %d; RSS up to %.1f MB, Go heap up to %.1f MB; %d rotations by its end",
				w[0].at.Round(time.Second), w[len(w)-1].at.Round(time.Second), m.meanLedger, m.segment, m.held, m.past, m.pending, mb(m.rss), mb(m.heap), w[len(w)-1].rotations)))
	}
	return res, nil
}

// sample is one reading of the sustain benchmark.
type sample struct {
	at              time.Duration
	segs            [ledger.Segments]int64 // rows of each segment of the ring
	ledger, pending int64                  // rows of all segments; pages not done
	appended        int64                  // rows ever appended to the segments (the server's statistics)
	rotations       int
	held, past      float64 // seconds: ringWatch.observe
	rss, heap       int64   // bytes: resident, and the Go heap live at the last GC
}

// sustainSampleSQL reads the pages not done, the clock (Unix seconds), the
// rows ever appended to the segments of the ring in catalog (the server's
// statistics) and the rows of each segment, in that order.
func sustainSampleSQL(catalog string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT (SELECT count(*) FROM %s.pages WHERE NOT done), date_part('epoch', clock_timestamp()), 0", catalog)
	for i := range ledger.Segments {
		fmt.Fprintf(&b, " + pg_stat_get_tuples_inserted('%s.%s'::regclass)", catalog, ledger.Segment(i))
	}
	for i := range ledger.Segments {
		fmt.Fprintf(&b, ", (SELECT count(*) FROM %s.%s)", catalog, ledger.Segment(i))
	}
	return b.String()
}

// ringWatch follows the segments of the ring from sample to sample.
type ringWatch struct {
	seen       bool
	emptySince [ledger.Segments]float64 // the clock when each segment was last seen empty
}

// observe takes the clock (Unix seconds) and each segment's rows, and says
// how long, in seconds, the segment that has held rows longest has held
// them since it was last seen empty (its period as the current segment
// included), and how long past the end of its last period a segment that
// is not the current one still held rows (0 when none did). A segment is
// current when the clock's seconds, rounded, over SegmentPeriod, modulo
// Segments, pick it (ledger.SegmentAt).
func (r *ringWatch) observe(epoch float64, segs [ledger.Segments]int64) (held, past float64) {
	period := int64(ledger.SegmentPeriod / time.Second)
	turn := int64(math.Round(epoch)) / period
	cur := turn % ledger.Segments
	for i, n := range segs {
		if !r.seen || n == 0 {
			r.emptySince[i] = epoch
		}
		held = max(held, epoch-r.emptySince[i])
		if n == 0 || int64(i) == cur {
			continue
		}
		// The last turn segment i was current, and when it ended.
		back := (turn - int64(i)) % ledger.Segments
		end := float64((turn-back+1)*period) - 0.5
		past = max(past, epoch-end)
	}
	r.seen = true
	return held, past
}

// summary is the largest figures of some samples.
type summary struct {
	ledger, segment, pending int64
	meanLedger               float64
	held, past               float64
	rss, heap                int64
}

func summarize(ss []sample) summary {
	var m summary
	var sum int64
	for _, sm := range ss {
		m.ledger, m.pending = max(m.ledger, sm.ledger), max(m.pending, sm.pending)
		for _, n := range sm.segs {
			m.segment = max(m.segment, n)
		}
		m.held, m.past = max(m.held, sm.held), max(m.past, sm.past)
		m.rss, m.heap = max(m.rss, sm.rss), max(m.heap, sm.heap)
		sum += sm.ledger
	}
	if len(ss) > 0 {
		m.meanLedger = float64(sum) / float64(len(ss))
	}
	return m
}

// windows cuts the samples of a run of length total into consecutive runs
// of span each by their time in the run (the last may be shorter, and
// takes the samples read after the run), none empty.
func windows(ss []sample, span, total time.Duration) [][]sample {
	last := max(0, int((total-1)/span))
	at := func(sm sample) int { return min(last, int(sm.at/span)) }
	var out [][]sample
	for _, sm := range ss {
		if len(out) == 0 || at(sm) > at(out[len(out)-1][0]) {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], sm)
	}
	return out
}

// selfRSS is this process's resident set size in bytes (0 when it cannot
// be read).
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// liveHeap is the Go heap live at the last GC, in bytes.
func liveHeap() int64 {
	sm := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sm)
	if sm[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(sm[0].Value.Uint64())
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
