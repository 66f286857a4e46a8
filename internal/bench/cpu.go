package bench

import (
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat (100
// on every Linux build Go supports).
const clockTicks = 100

// cpuSample is the CPU time used so far by the server's processes (every
// one pg_stat_activity lists: backends, and the checkpointer, WAL writer and
// other background processes) and by this process (the writers, the
// pollers and the Trellis workers running in it), in clock ticks. reaped
// is the CPU of the postmaster's children that have exited (its cutime and
// cstime): parallel query workers live only for one statement, so a sample
// of the live processes alone would miss them (a parallel CREATE TABLE AS
// would look cheaper than it is).
type cpuSample struct {
	server map[int]int64
	reaped int64 // -1: the postmaster could not be read
	self   int64
	ok     bool // /proc could be read for the server's processes
}

// sampleCPU reads the CPU times of the server's processes and of this
// process. A server whose processes cannot be read (another machine) gives
// a sample with ok false, and the figures say "n/a".
func (e *env) sampleCPU(ctx context.Context) cpuSample {
	s := cpuSample{server: map[int]int64{}, reaped: -1, self: procTicks(os.Getpid())}
	rows, err := e.pool.Query(ctx, `SELECT pid FROM pg_stat_activity`)
	if err != nil {
		return s
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return s
	}
	for _, pid := range pids {
		if t := procTicks(int(pid)); t >= 0 {
			s.server[int(pid)] = t
			s.ok = true
		}
	}
	for _, pid := range pids {
		if parent := procParent(int(pid)); parent > 1 {
			s.reaped = procChildTicks(parent)
			break
		}
	}
	return s
}

// cpuSince is the CPU seconds spent by the server and this process between
// two samples. A process that started since counts from zero. One that
// exited is counted through the postmaster's reaped children (which hold
// its whole life, so its part before the first sample is taken off); a
// process that started and exited between the samples (a parallel worker)
// is counted whole. Without the postmaster's figures an exited process is
// left out.
func cpuSince(a, b cpuSample) (seconds float64, ok bool) {
	if !a.ok || !b.ok {
		return 0, false
	}
	var ticks int64
	for pid, t := range b.server {
		ticks += t - a.server[pid]
	}
	if a.reaped >= 0 && b.reaped >= a.reaped {
		ticks += b.reaped - a.reaped
		for pid, t := range a.server {
			if _, alive := b.server[pid]; !alive {
				ticks -= t
			}
		}
	}
	ticks += b.self - a.self
	return float64(ticks) / clockTicks, true
}

// procTicks is utime+stime of a process, in clock ticks; -1 when it cannot
// be read.
func procTicks(pid int) int64 { return procSum(pid, 14) }

// procChildTicks is cutime+cstime of a process (the CPU of its children
// that exited and were waited for), in clock ticks; -1 when it cannot be
// read.
func procChildTicks(pid int) int64 { return procSum(pid, 16) }

// procParent is the parent's pid of a process; -1 when it cannot be read.
func procParent(pid int) int {
	f := procFields(pid)
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}

// procSum is the sum of fields n and n+1 (counted from 1, as proc(5) does)
// of /proc/<pid>/stat; -1 when they cannot be read.
func procSum(pid, n int) int64 {
	f := procFields(pid)
	// f[0] is field 3.
	if len(f) < n-1 {
		return -1
	}
	a, err1 := strconv.ParseInt(f[n-3], 10, 64)
	b, err2 := strconv.ParseInt(f[n-2], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return a + b
}

// procFields are the fields of /proc/<pid>/stat from the third (state) on;
// nil when it cannot be read.
func procFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields counted from after its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// meter measures the CPU spent on a number of changes.
type meter struct {
	e     *env
	start cpuSample
}

func (e *env) startMeter(ctx context.Context) *meter {
	return &meter{e: e, start: e.sampleCPU(ctx)}
}

// perChange is the CPU microseconds per change since the meter started, 0
// when it cannot be measured.
func (m *meter) perChange(ctx context.Context, changes float64) float64 {
	all, _ := m.split(ctx, changes)
	return all
}

// split is perChange, and the part of it this process spent (the Trellis
// workers a benchmark runs in it, its writers and pollers).
func (m *meter) split(ctx context.Context, changes float64) (all, self float64) {
	end := m.e.sampleCPU(ctx)
	sec, ok := cpuSince(m.start, end)
	if !ok || changes <= 0 {
		return 0, 0
	}
	return sec * 1e6 / changes, float64(end.self-m.start.self) / clockTicks * 1e6 / changes
}
