package trellis_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// lockedBuffer is a log destination safe from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records are the JSON log records written so far with message msg.
func (l *lockedBuffer) records(t *testing.T, msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var r map[string]any
		if line == "" {
			continue
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// awaitRecords waits until n records with message msg are written and
// returns them: a build logs its finish just after the commit that makes
// its transform live, so a test that saw the state may not see the record
// yet.
func (l *lockedBuffer) awaitRecords(t *testing.T, msg string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := l.records(t, msg)
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every build, a projection's and a GROUP BY's alike, logs its start and
// its finish with the rows it wrote and how long it took.
func TestBuildsLogStartAndFinish(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, grp int, n int); INSERT INTO items SELECT g, g % 7, g FROM generate_series(1, 500) g`)
	logs := &lockedBuffer{}
	m := e.connect(trellis.Options{})
	require.NoError(t, m.Migrate(e.ctx))
	c := e.connect(trellis.Options{Staging: true, DrainWorkers: 1,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	for _, s := range []string{
		"TRANSFORM item_copy FROM items SELECT n AS n",
		"TRANSFORM item_sums FROM items SELECT grp AS grp, sum(n) AS n GROUP BY grp",
	} {
		_, err := c.Define(e.ctx, s)
		require.NoError(t, err)
	}
	e.waitState(c, "item_copy", trellis.StateLive)
	e.waitState(c, "item_sums", trellis.StateLive)
	started := map[string]bool{}
	for _, r := range logs.records(t, "build started") {
		started[r["target"].(string)] = true
	}
	require.Equal(t, map[string]bool{"public.item_copy": true, "public.item_sums": true}, started)
	finished := map[string]map[string]any{}
	for _, r := range logs.awaitRecords(t, "build finished; transform is live", 2) {
		finished[r["target"].(string)] = r
	}
	require.Len(t, finished, 2)
	require.EqualValues(t, 500, finished["public.item_copy"]["rows"])
	require.EqualValues(t, 7, finished["public.item_sums"]["rows"])
	for _, r := range finished {
		require.NotEmpty(t, r["duration"])
		require.NotEmpty(t, r["trellis_instance"])
	}
}
