package cli_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
)

// scrape GETs url and returns the body.
func scrape(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestWorkerMetricsAddr(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(ordersDDL)
	e.ok("migrate")
	e.ok("apply", "TRANSFORM order_totals FROM orders SELECT price + tax AS total")
	var db string
	require.NoError(t, e.db.QueryRow(e.ctx, "SELECT current_database()").Scan(&db))
	inst := fmt.Sprintf("trellis_instance=%q", db+"/trellis")

	// An address in use fails the command.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := e.run("worker", "--metrics-addr", taken.Addr().String())
	require.NoError(t, taken.Close())
	require.Equal(t, cli.ExitError, r.code)
	require.Contains(t, r.stderr, "--metrics-addr")

	// Port 0: the worker picks a free port and logs the address it bound.
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"worker", "--staging", "--drain", "1", "--metrics-addr", ":0", "--url", e.url},
			cli.Env{Stdout: io.Discard, Stderr: &logs})
	}()
	addrRe := regexp.MustCompile(`msg="serving metrics" addr=(\S+) path=/metrics`)
	var addr string
	require.Eventually(t, func() bool {
		m := addrRe.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, time.Minute, 10*time.Millisecond, "no address logged: %s", logs.String())
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), "an address without a host binds the loopback only: %s", addr)
	url := "http://" + addr + "/metrics"

	// The worker builds the target, then applies a write; the scrape shows
	// both under the instance's label, next to the process's own series.
	var body string
	var code int
	require.Eventually(t, func() bool {
		code, body, err = scrape(e.ctx, url)
		return err == nil && code == http.StatusOK &&
			regexp.MustCompile(`trellis_builds_total\{result="finished",`+regexp.QuoteMeta(inst)+`\} 1\n`).MatchString(body)
	}, time.Minute, 20*time.Millisecond, "the build never showed; last scrape:\n%s", body)
	e.exec(`UPDATE orders SET tax = tax + 1 WHERE id <= 10`)
	pagesOK := regexp.MustCompile(`trellis_drain_pages_total\{result="ok",` + regexp.QuoteMeta(inst) + `\} ([1-9][0-9]*)\n`)
	require.Eventually(t, func() bool {
		code, body, err = scrape(e.ctx, url)
		return err == nil && code == http.StatusOK && pagesOK.MatchString(body)
	}, time.Minute, 20*time.Millisecond, "no drain page showed; last scrape:\n%s", body)
	require.Contains(t, body, "# HELP trellis_drain_keys_applied_total ")
	require.Contains(t, body, "go_goroutines ")

	// The staging worker's samples: per transform, and trellis_up.
	perTarget := regexp.MustCompile(`trellis_transform_pending_changes\{target="public.order_totals",` + regexp.QuoteMeta(inst) + `\} 0\n`)
	up := regexp.MustCompile(`trellis_up\{` + regexp.QuoteMeta(inst) + `\} 1\n`)
	require.Eventually(t, func() bool {
		code, body, err = scrape(e.ctx, url)
		return err == nil && code == http.StatusOK && perTarget.MatchString(body) && up.MatchString(body)
	}, time.Minute, 20*time.Millisecond, "no per-transform series or trellis_up; last scrape:\n%s", body)
	require.Regexp(t, `trellis_transform_state\{state="live",target="public.order_totals",`+regexp.QuoteMeta(inst)+`\} 1\n`, body)

	// Health and readiness on the same address.
	code, body, err = scrape(e.ctx, "http://"+addr+"/healthz")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	require.Eventually(t, func() bool {
		code, body, err = scrape(e.ctx, "http://"+addr+"/readyz")
		return err == nil && code == http.StatusOK
	}, time.Minute, 20*time.Millisecond, "never ready: %d %s", code, body)

	code, _, err = scrape(e.ctx, "http://"+addr+"/other")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, code)

	cancel()
	select {
	case code := <-done:
		require.Equal(t, cli.ExitOK, code, logs.String())
	case <-time.After(time.Minute):
		t.Fatal("the worker did not stop")
	}
	_, _, err = scrape(e.ctx, url)
	require.Error(t, err, "the metrics server stops with the worker")
}
