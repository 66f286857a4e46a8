package bench

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/trellis-pg/trellis/internal/testpg"
)

// Temporary: runs the drain benchmark of a shape with auto_explain on and
// keeps the server log.
func TestZZInvestigate(t *testing.T) {
	shape := os.Getenv("INV_SHAPE")
	if shape == "" {
		t.Skip()
	}
	changes, _ := strconv.Atoi(os.Getenv("INV_CHANGES"))
	secs, _ := strconv.Atoi(os.Getenv("INV_SECS"))
	c, err := testpg.Start(context.Background(), testpg.Options{Settings: map[string]string{
		"shared_preload_libraries":     "auto_explain",
		"auto_explain.log_min_duration": os.Getenv("INV_MIN"),
		"auto_explain.log_analyze":     "on",
		"auto_explain.log_buffers":     "on",
		"log_min_messages":             "log",
		"log_min_duration_statement":   os.Getenv("INV_MIN"),
	}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
	defer cancel()
	var out bytes.Buffer
	_, err = RunResults(ctx, Options{URL: c.URL("postgres"), Shape: shape, Only: []string{Drain}, Changes: changes, Logf: t.Logf}, &out)
	t.Log(out.String(), err)
	b, _ := os.ReadFile(c.LogPath())
	os.WriteFile("/tmp/benchruns/inv-"+shape+".log", b, 0o644)
}
