package bench

import (
	"bytes"
	"context"
	"flag"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/trellis-pg/trellis/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(m)) }

// TestBenchSmoke runs every benchmark at a tiny size against a throwaway
// database and checks that each figure is a positive number. It asserts no
// time and no ratio.
func TestBenchSmoke(t *testing.T) {
	url := testpg.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	results, err := RunResults(ctx, Options{
		URL:      url,
		Rows:     2000,
		Changes:  2000,
		Duration: time.Second,
		Logf:     t.Logf,
	}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range results {
		names[strings.SplitN(r.Name, "/", 2)[0]] = true
		for _, v := range []float64{r.Baseline, r.Measured, r.Ratio} {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%s: baseline %v, measured %v, ratio %v: want positive numbers", r.Name, r.Baseline, r.Measured, r.Ratio)
				break
			}
		}
	}
	for _, n := range All {
		if !names[n] {
			t.Errorf("no result of benchmark %s", n)
		}
	}
}

var full = flag.Bool("bench.full", false, "BenchmarkTrellis: run the full-size suite (1M rows, 20 s phases) once")

// BenchmarkTrellis runs the suite once on its own throwaway cluster and
// prints the report; b.N is ignored (the suite times itself). Sizes are
// tiny unless -bench.full is given:
//
//	go test ./internal/bench -run '^$' -bench Trellis -benchtime 1x -timeout 20m -bench.full
func BenchmarkTrellis(b *testing.B) {
	opts := Options{Logf: b.Logf}
	if !*full {
		opts.Rows, opts.Changes, opts.Duration = 20_000, 20_000, 2*time.Second
	}
	var out bytes.Buffer
	results, err := RunResults(context.Background(), opts, &out)
	os.Stdout.Write(out.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range results {
		b.ReportMetric(r.Ratio, strings.ReplaceAll(r.Name, "/", "_")+"_ratio")
	}
}
