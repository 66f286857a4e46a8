package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// probe is one write the poller waits to see in the target: the target
// row of key must show at least v (the row's new v; for a GROUP BY, the
// group's new total).
type probe struct {
	id, v     int64     // target key and least value
	committed time.Time // when the writer's UPDATE returned
}

// latency measures commit-to-target latency at a steady 500 writes/s on a
// source of Rows rows (the write and backfill benchmarks' data): one
// writer paced by a ticker sets a fresh value on a random row and records
// when its commit returned; a poller looks for the outstanding values in
// the target every millisecond (one query for all of them) and records when
// it first saw each. The baseline is the writer's own commit latency.
//
// For a GROUP BY the poller reads the group's total, which the writer
// tracks (each write raises a row's v, so a group's total only grows); for
// a JOIN, v of the row's target row.
func (s *suite) latency(ctx context.Context, e *env) ([]Result, error) {
	rows := s.opts.Rows
	if err := e.createSource(ctx, rows); err != nil {
		return nil, err
	}
	c, err := e.connect(ctx, true, drainWorkers)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	if _, err := e.define(ctx, c); err != nil {
		return nil, err
	}
	if err := e.checkPoll(ctx); err != nil {
		return nil, err
	}
	e.checkpoint(ctx)
	e.quiesce(ctx)

	writer, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return nil, err
	}
	defer writer.Close(context.WithoutCancel(ctx))
	poller, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return nil, err
	}
	defer poller.Close(context.WithoutCancel(ctx))

	probes := make(chan probe, latencyRate*int(latencyGrace/time.Second+s.opts.Duration/time.Second+1))
	type pollResult struct {
		delays     []time.Duration
		unresolved int
		queries    int
		err        error
	}
	done := make(chan pollResult, 1)
	go func() {
		var r pollResult
		r.delays, r.unresolved, r.queries, r.err = poll(ctx, poller, e.pollQuery(), probes)
		done <- r
	}()

	upd := fmt.Sprintf("UPDATE %s SET v = $2 WHERE id = $1", e.table("bench_src"))
	rng := rand.New(rand.NewPCG(1, 2))
	track := e.prober()
	var commits []time.Duration
	tick := time.NewTicker(time.Second / latencyRate)
	begin := time.Now()
	deadline := begin.Add(s.opts.Duration)
	var werr error
	for v := int64(1); time.Now().Before(deadline); v++ {
		<-tick.C
		id := rng.Int64N(int64(rows)) + 1
		start := time.Now()
		if _, err := writer.Exec(ctx, upd, id, v); err != nil {
			werr = fmt.Errorf("writing: %w", err)
			break
		}
		end := time.Now()
		commits = append(commits, end.Sub(start))
		if !track.polled(id) {
			continue
		}
		key, want := track.wrote(id, v)
		probes <- probe{id: key, v: want, committed: end}
	}
	tick.Stop()
	elapsed := time.Since(begin)
	close(probes)
	pr := <-done
	if werr != nil {
		return nil, werr
	}
	if pr.err != nil {
		return nil, pr.err
	}
	if pr.unresolved > 0 {
		return nil, fmt.Errorf("%d of %d writes did not reach the target within %s after the writer stopped", pr.unresolved, len(commits), latencyGrace)
	}
	if len(pr.delays) == 0 {
		return nil, fmt.Errorf("no write was measured")
	}
	rate := float64(len(commits)) / elapsed.Seconds()
	target, commit := sortedMillis(pr.delays), sortedMillis(commits)
	p50, p99 := quantile(target, 0.5), quantile(target, 0.99)
	e.logf("%d writes at %.0f/s; commit-to-target p50 %.2f ms, p99 %.2f ms, max %.2f ms; commit p50 %.2f ms; %d poll queries",
		len(commits), rate, p50, p99, target[len(target)-1], quantile(commit, 0.5), pr.queries)
	ctxNote := fmt.Sprintf("%d writes at %.0f/s to %d source rows; lower is better", len(commits), rate, rows)
	return []Result{
		result("latency/p50", quantile(commit, 0.5), p50, "ms",
			fmt.Sprintf("commit-to-target vs the writer's own commit latency; %s; %.2f of DESIGN's 50 ms median bar", ctxNote, p50/ms(targetLatency))),
		result("latency/p99", quantile(commit, 0.99), p99, "ms",
			fmt.Sprintf("commit-to-target vs the writer's own commit latency; max %.1f ms", target[len(target)-1])),
	}, nil
}

// poll resolves probes until the channel is closed and every probe is
// resolved, or latencyGrace after the close. A probe is resolved when its
// target row's value is at least the probe's value (values only grow).
// The delay is measured to the end of the poll query that saw it, so it
// errs high by at most one poll.
func poll(ctx context.Context, conn *pgx.Conn, q string, probes <-chan probe) (delays []time.Duration, unresolved, queries int, err error) {
	out := map[int64][]probe{}
	n := 0
	open := true
	var giveUp time.Time
	add := func(p probe) {
		out[p.id] = append(out[p.id], p)
		n++
	}
	tick := time.NewTicker(latencyPoll)
	defer tick.Stop()
	ids := make([]int64, 0, 1024)
	for {
		// Take in every probe sent so far; block when there is nothing to poll for.
		for open {
			if n == 0 {
				p, ok := <-probes
				if !ok {
					open = false
					break
				}
				add(p)
				continue
			}
			select {
			case p, ok := <-probes:
				if !ok {
					open = false
					break
				}
				add(p)
				continue
			default:
			}
			break
		}
		if !open {
			if n == 0 {
				return delays, 0, queries, nil
			}
			if giveUp.IsZero() {
				giveUp = time.Now().Add(latencyGrace)
			} else if time.Now().After(giveUp) {
				return delays, n, queries, nil
			}
		}
		ids = ids[:0]
		for id := range out {
			ids = append(ids, id)
		}
		rows, err := conn.Query(ctx, q, ids)
		if err != nil {
			return nil, 0, queries, fmt.Errorf("polling the target: %w", err)
		}
		queries++
		type seen struct{ id, v int64 }
		var got []seen
		for rows.Next() {
			var s seen
			if err := rows.Scan(&s.id, &s.v); err != nil {
				rows.Close()
				return nil, 0, queries, err
			}
			got = append(got, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, 0, queries, fmt.Errorf("polling the target: %w", err)
		}
		now := time.Now()
		for _, s := range got {
			ps := out[s.id]
			keep := ps[:0]
			for _, p := range ps {
				if s.v >= p.v {
					delays = append(delays, now.Sub(p.committed))
					n--
				} else {
					keep = append(keep, p)
				}
			}
			if len(keep) == 0 {
				delete(out, s.id)
			} else {
				out[s.id] = keep
			}
		}
		select {
		case <-ctx.Done():
			return nil, 0, queries, ctx.Err()
		case <-tick.C:
		}
	}
}

// pollQuery reads the latency poller's key and value of the target rows
// whose keys $1 holds, through the target's unique index: the key columns
// before the polled one (pollPrefix) are given their values.
func (e *env) pollQuery() string {
	k, v, tgt := e.shape.pollKey, e.shape.pollVal, e.table("bench_tgt")
	if len(e.shape.pollPrefix) == 0 {
		return fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = ANY($1)", k, v, tgt, k)
	}
	on := make([]string, 0, len(e.shape.pollPrefix)+1)
	for _, c := range e.shape.pollPrefix {
		on = append(on, fmt.Sprintf("t.%s = %s", c[0], c[1]))
	}
	on = append(on, fmt.Sprintf("t.%s = p.x", k))
	return fmt.Sprintf("SELECT t.%s, t.%s FROM unnest($1::bigint[]) AS p(x) JOIN %s t ON %s", k, v, tgt, strings.Join(on, " AND "))
}

// checkPoll fails when the poll query cannot find its rows by searching
// the target's key index on its first column: a plan (with sequential
// scans disabled) that reads the target whole, or walks the whole index
// with a condition on a later column only. Each poll would then cost a
// scan of the target, which delays the very changes it waits for and
// steals the drain's CPU (170 ms a poll on union_join's 1M-row target). A
// target polled whole (a global aggregate's one row, a global top-k's
// ten) is exempt.
func (e *env) checkPoll(ctx context.Context) error {
	if !slices.Contains(e.shape.keys, e.shape.pollKey) {
		return nil
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		return err
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+e.pollQuery(), []int64{1, 2, 3}).Scan(&raw); err != nil {
		return fmt.Errorf("explaining the poll query: %w", err)
	}
	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		return fmt.Errorf("reading the poll query's plan: %v", err)
	}
	first := regexp.MustCompile(`\b` + regexp.QuoteMeta(e.shape.keys[0]) + ` = `)
	if bad := plan[0].Plan.wholeScans("bench_tgt", first); bad != "" {
		return fmt.Errorf("the latency poll query reads the whole target (%s; no search of its key's first column %s): %s", bad, e.shape.keys[0], e.pollQuery())
	}
	return nil
}

// planNode is a node of an EXPLAIN (FORMAT JSON) plan.
type planNode struct {
	NodeType    string     `json:"Node Type"`
	Relation    string     `json:"Relation Name"`
	IndexCond   string     `json:"Index Cond"`
	RecheckCond string     `json:"Recheck Cond"`
	Plans       []planNode `json:"Plans"`
}

// wholeScans returns the first node of the plan that reads relation rel
// without a condition first matches: a sequential scan, or an index or
// bitmap scan whose condition does not match; "" when there is none.
func (n planNode) wholeScans(rel string, first *regexp.Regexp) string {
	if n.Relation == rel {
		switch n.NodeType {
		case "Index Scan", "Index Only Scan":
			if !first.MatchString(n.IndexCond) {
				return n.NodeType + " on " + n.IndexCond
			}
		case "Bitmap Heap Scan":
			if !first.MatchString(n.RecheckCond) {
				return n.NodeType + " on " + n.RecheckCond
			}
		default:
			return n.NodeType
		}
	}
	for _, c := range n.Plans {
		if bad := c.wholeScans(rel, first); bad != "" {
			return bad
		}
	}
	return ""
}
