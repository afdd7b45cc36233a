package fabric

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	progs["bind"] = func(ctx context.Context, ep *Endpoint) error {
		var set unix.CPUSet
		must(unix.SchedGetaffinity(0, &set), "sched_getaffinity")
		if set.Count() != 1 || !set.IsSet(0) {
			failf("bound to %d CPUs, want CPU 0 alone", set.Count())
		}
		want := 1
		if v, err := strconv.Atoi(os.Getenv("RIVET_TEST_GOMAXPROCS")); err == nil {
			want = v
		}
		if got := runtime.GOMAXPROCS(0); got != want {
			failf("GOMAXPROCS %d after binding to one CPU, want %d", got, want)
		}
		return nil
	}
}

// A rank bound to one CPU runs Go code on one thread from Init on,
// unless the user set GOMAXPROCS.
func TestBindOneCPU(t *testing.T) {
	runOK(t, 2, "bind", "RIVET_CPU=0")
	runOK(t, 2, "bind", "RIVET_CPU=0", "GOMAXPROCS=3", "RIVET_TEST_GOMAXPROCS=3")
}

// A spinning wait is told to pass through the scheduler every schedEvery
// (it would otherwise be preempted by signal), and only then.
func TestWaitSchedules(t *testing.T) {
	e := newEngine(0, 1)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.scan(nil)
	if !e.schedDue.Load() {
		t.Fatal("first scan: no pass through the scheduler due")
	}
	e.backoff(0)
	if e.schedDue.Load() {
		t.Fatal("backoff left the pass due")
	}
	e.lastScan = time.Time{} // scan again at once: too soon to be due
	e.scan(nil)
	if e.schedDue.Load() {
		t.Fatalf("due again %v after the last one", time.Since(e.sched))
	}
	e.lastScan, e.sched = time.Time{}, time.Now().Add(-schedEvery)
	e.scan(nil)
	if !e.schedDue.Load() {
		t.Fatal("not due after schedEvery")
	}
}
