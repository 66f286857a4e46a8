package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
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
)

// sustain writes at a steady rate (Options.Rate, default 1,000 writes/s)
// for Options.Duration with capture and 2 drain workers running in this
// process, and samples every second the ledger's size, the pages not done,
// the ring's rotations, and this process's resident memory and Go heap (the
// workers run here; the writers too, and they hold no growing state). It
// reports the largest ledger in seconds of writes and the memory growth
// from the first tenth of the run to its end: the ledger must stay bounded
// by a few seconds of writes (segments reclaimed while pages are in
// flight), and a worker's memory flat.
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

	type sample struct {
		at              time.Duration
		ledger, pending int64
		rotations       int
		rss, heap       int64 // bytes: resident, and the Go heap live at the last GC
	}
	var samples []sample
	// The ring turns with the clock (ledger.SegmentAt): a rotation is
	// the segment writers append to moving on.
	firstTurn := int64(-1)
	read := func(at time.Duration) error {
		var sm sample
		var turn int64
		err := e.pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s.ledger), (SELECT count(*) FROM %[1]s.pages WHERE NOT done),
       date_part('epoch', now())::int8 / %[2]d`, e.catalog, int(ledger.SegmentPeriod/time.Second))).
			Scan(&sm.ledger, &sm.pending, &turn)
		if err != nil {
			return fmt.Errorf("sampling the ledger: %w", err)
		}
		if firstTurn < 0 {
			firstTurn = turn
		}
		rotations := int(turn - firstTurn)
		sm.at, sm.rotations, sm.rss, sm.heap = at, rotations, selfRSS(), liveHeap()
		samples = append(samples, sm)
		return nil
	}
	if err := read(0); err != nil {
		return nil, err
	}
	e.logf("writing %.0f writes/s for %s (a line every %s)", ws.rate, s.opts.Duration, max(sustainSample, s.opts.Duration/sustainReports).Round(time.Second))
	// The parser's warm-up (define) leaves garbage a first GC frees: the
	// run starts from a collected heap.
	runtime.GC()
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
			e.logf("%6s: ledger %7d rows, %3d pages pending, %3d rotations, RSS %6.1f MB, Go heap %6.1f MB",
				sm.at.Round(time.Second), sm.ledger, sm.pending, sm.rotations, mb(sm.rss), mb(sm.heap))
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
	var most, sum int64
	for _, sm := range steady {
		most = max(most, sm.ledger)
		sum += sm.ledger
	}
	rate := float64(out.n) / s.opts.Duration.Seconds()
	first, last := steady[0], samples[len(samples)-1]
	return []Result{
		result("sustain/ledger", rate, float64(most), "rows",
			fmt.Sprintf("largest ledger over the steady run vs writes per second (ratio: seconds of writes held); mean %.0f rows; %d ring rotations in %s; drain %s; %.0f µs CPU per write, every process",
				float64(sum)/float64(len(steady)), last.rotations, s.opts.Duration, lag, cpu)),
		result("sustain/heap", mb(first.heap), mb(last.heap), "MB",
			fmt.Sprintf("this process's live Go heap (2 drain workers, the writers) at %s and at the end, after a GC; resident memory %.1f -> %.1f MB", first.at.Round(time.Second), mb(first.rss), mb(last.rss))),
	}, nil
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
