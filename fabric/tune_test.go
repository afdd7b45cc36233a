//go:build linux

package fabric

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/sysmon"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() {
	progs.Add("bind", progBind)
	progs.BeforeInit("bind", pinForTest)
}

// pinForTest confines every thread of the process to the CPU
// TUNE_TEST_CPU names, as a launcher's binding would have from the start.
func pinForTest() {
	v := os.Getenv("TUNE_TEST_CPU")
	if v == "" {
		return
	}
	cpu, err := strconv.Atoi(v)
	if err == nil {
		err = testutil.PinProcess(cpu)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "TUNE_TEST_CPU:", err)
		os.Exit(2)
	}
}

// progBind reports what Init did to the process: the CPUs its threads
// may run on, and the runtime monitor's policy with the number of
// threads under SCHED_IDLE. Threads the demoted monitor started inherit
// SCHED_IDLE until sysmon's guard resets them, within 50 ms; the count is
// taken once it is at most one, or after 2 s.
func progBind(ctx context.Context, ep *Endpoint) error {
	var idle int // threads under SCHED_IDLE
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		idle = 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy == unix.SCHED_IDLE {
				idle++
			}
		}
		if idle <= 1 || time.Now().After(deadline) {
			break
		}
	}
	fmt.Printf("rank %d: cpus %v, sysmon %s (%d idle), oversubscribed %v, gomaxprocs %d\n", ep.World().Rank(), testutil.ThreadCPUs(), sysmon.State(), idle, ep.e.spin < 4096, runtime.GOMAXPROCS(0))
	return nil
}

// allCPUs lists this machine's CPUs as progBind prints an unpinned mask.
func allCPUs() string {
	cpus := make([]string, runtime.NumCPU())
	for c := range cpus {
		cpus[c] = strconv.Itoa(c)
	}
	return strings.Join(cpus, ",")
}

// TestProcessTuning: on a pinned rank of a node that is not
// oversubscribed, process tuning (which the launcher turns on) moves the
// runtime's monitor thread, and it alone, to SCHED_IDLE, and leaves the
// CPU mask as it was; without tuning, with RIVET_SYSMON=normal, or on an
// oversubscribed node, Init leaves the monitor alone; a RIVET_SYSMON
// that is not a choice fails Init.
func TestProcessTuning(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to tell a pinned rank from an unpinned one")
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"TUNE_TEST_CPU=1"}, "cpus [1], sysmon idle (1 idle)"},
		{[]string{"TUNE_TEST_CPU=1", "RIVET_TUNE_PROCESS=0"}, "cpus [1], sysmon normal (0 idle)"},
		{[]string{"TUNE_TEST_CPU=0", "RIVET_SYSMON=normal"}, "cpus [0], sysmon normal (0 idle)"},
		{[]string{"RIVET_SYSMON=idle"}, "cpus [" + allCPUs() + "], sysmon idle (1 idle)"},
	} {
		out := runOK(t, 2, "bind", tc.env...)
		for r := 0; r < 2; r++ {
			if want := fmt.Sprintf("rank %d: %s, oversubscribed false, gomaxprocs ", r, tc.want); !strings.Contains(out, want) {
				t.Errorf("%v: want %q in\n%s", tc.env, want, out)
			}
		}
	}
	// More ranks than CPUs: tuning brings each rank's Go code down to one
	// thread, unless the environment sets GOMAXPROCS.
	n := runtime.NumCPU() + 1
	for _, tc := range []struct {
		env  []string
		want int
	}{
		{nil, 1},
		{[]string{"RIVET_TUNE_PROCESS=0"}, runtime.NumCPU()},
		{[]string{"GOMAXPROCS=2"}, 2},
	} {
		out := runOK(t, n, "bind", append([]string{"GOMAXPROCS="}, tc.env...)...)
		if want := fmt.Sprintf("oversubscribed true, gomaxprocs %d\n", tc.want); strings.Count(out, want) != n {
			t.Errorf("%d ranks, %v: want %q from every rank in\n%s", n, tc.env, want, out)
		}
	}
	// Pinned ranks of an oversubscribed node keep the monitor as it is:
	// their waits yield to each other, so under SCHED_IDLE its turn — and
	// the network poll — would hardly come.
	out := runOK(t, n, "bind", "TUNE_TEST_CPU=1")
	if want := "cpus [1], sysmon normal (0 idle), oversubscribed true"; strings.Count(out, want) != n {
		t.Errorf("%d ranks pinned to CPU 1: want %q from every rank in\n%s", n, want, out)
	}
	// Ranks pinned before they start, one per CPU, see one CPU in
	// runtime.NumCPU and are not oversubscribed; their runtime started
	// with GOMAXPROCS 1.
	out = jobtest.BoundJobOK(t, runtime.NumCPU(), progEnv+"=bind", "GOMAXPROCS=")
	for r := 0; r < runtime.NumCPU(); r++ {
		if want := fmt.Sprintf("rank %d: cpus [%d], sysmon idle (1 idle), oversubscribed false, gomaxprocs 1\n", r, r); !strings.Contains(out, want) {
			t.Errorf("bound ranks: want %q in\n%s", want, out)
		}
	}
	_, errs, st := runJob(t, 1, "bind", false, "RIVET_SYSMON=low")
	if st == 0 || !strings.Contains(errs, `RIVET_SYSMON="low" (want idle, normal or auto)`) {
		t.Errorf("RIVET_SYSMON=low: status %d, stderr:\n%s", st, errs)
	}
}

func TestCountCPUList(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-1": 2, "0-3,8,10-11": 7, "2-2": 1} {
		if n, ok := countCPUList(in); !ok || n != want {
			t.Errorf("%q: %d %v, want %d", in, n, ok, want)
		}
	}
	for _, bad := range []string{"", "x", "3-1", "1-", "-1", "0,,1"} {
		if n, ok := countCPUList(bad); ok {
			t.Errorf("%q: %d accepted", bad, n)
		}
	}
	if n := nodeCPUs(); n < runtime.NumCPU() {
		t.Errorf("nodeCPUs %d < NumCPU %d", n, runtime.NumCPU())
	}
}
