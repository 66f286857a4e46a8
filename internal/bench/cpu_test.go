package bench

import (
	"os"
	"testing"
)

// A process that exits between two samples is counted through the
// postmaster's reaped children: a parallel worker that lived only between
// them counts whole, a backend that was already alive only for its part
// after the first sample.
func TestCPUSinceCountsExitedProcesses(t *testing.T) {
	a := cpuSample{server: map[int]int64{10: 100, 11: 40}, reaped: 1000, self: 5, ok: true}
	// 10 used 20 more; 11 exited having used 60 in all (20 after a); a
	// parallel worker used 30 and exited: the postmaster reaped 60 + 30.
	b := cpuSample{server: map[int]int64{10: 120}, reaped: 1090, self: 8, ok: true}
	got, ok := cpuSince(a, b)
	if !ok {
		t.Fatal("cpuSince refused two readable samples")
	}
	if want := float64(20+20+30+3) / clockTicks; got != want {
		t.Fatalf("cpuSince = %v s, want %v s", got, want)
	}
	// Without the postmaster's figures, exited processes are left out.
	a.reaped, b.reaped = -1, -1
	if got, _ := cpuSince(a, b); got != float64(20+3)/clockTicks {
		t.Fatalf("cpuSince without reaped children = %v s, want %v s", got, float64(23)/clockTicks)
	}
}

// The fields read from /proc are this process's own: its parent, and CPU
// times that do not go backwards.
func TestProcFields(t *testing.T) {
	if got := procParent(os.Getpid()); got != os.Getppid() {
		t.Fatalf("procParent = %d, want %d", got, os.Getppid())
	}
	if procTicks(os.Getpid()) < 0 || procChildTicks(os.Getpid()) < 0 {
		t.Fatal("CPU times of this process unreadable")
	}
}
