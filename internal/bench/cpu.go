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
// pollers and the Trellis workers running in it), in clock ticks.
type cpuSample struct {
	server map[int]int64
	self   int64
	ok     bool // /proc could be read for the server's processes
}

// sampleCPU reads the CPU times of the server's processes and of this
// process. A server whose processes cannot be read (another machine) gives
// a sample with ok false, and the figures say "n/a".
func (e *env) sampleCPU(ctx context.Context) cpuSample {
	s := cpuSample{server: map[int]int64{}, self: procTicks(os.Getpid())}
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
	return s
}

// cpuSince is the CPU seconds spent by the server and this process between
// two samples. A process that started since counts from zero; one that
// exited is left out (its last part is lost: the benchmarks keep their
// connections open, so that is rare).
func cpuSince(a, b cpuSample) (seconds float64, ok bool) {
	if !a.ok || !b.ok {
		return 0, false
	}
	var ticks int64
	for pid, t := range b.server {
		ticks += t - a.server[pid]
	}
	ticks += b.self - a.self
	return float64(ticks) / clockTicks, true
}

// procTicks is utime+stime of a process, in clock ticks; -1 when it cannot
// be read.
func procTicks(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields counted from after its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return u + st
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
	sec, ok := cpuSince(m.start, m.e.sampleCPU(ctx))
	if !ok || changes <= 0 {
		return 0
	}
	return sec * 1e6 / changes
}
