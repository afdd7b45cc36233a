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

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/sysmon"
)

func init() {
	progs["bind"] = progBind
	preInit["bind"] = func() { bindStartProcs = runtime.GOMAXPROCS(0) }
}

// bindStartProcs is GOMAXPROCS before Init, in a "bind" rank.
var bindStartProcs int

// progBind reports what Init did with RIVET_CPU: the CPUs every thread
// may run on, GOMAXPROCS before and after, and the runtime monitor's
// policy with the number of threads under SCHED_IDLE.
func progBind(ctx context.Context, ep *Endpoint) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	cpus := map[string]bool{}
	idle := 0 // threads under SCHED_IDLE
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy == unix.SCHED_IDLE {
			idle++
		}
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // the thread has gone
		}
		var on []string
		for c := 0; c < len(set)*64; c++ {
			if set.IsSet(c) {
				on = append(on, strconv.Itoa(c))
			}
		}
		cpus[strings.Join(on, ",")] = true
	}
	var masks []string
	for m := range cpus {
		masks = append(masks, m)
	}
	fmt.Printf("rank %d: cpus %v gomaxprocs %d -> %d, sysmon %s (%d idle)\n", ep.World().Rank(), masks, bindStartProcs, runtime.GOMAXPROCS(0), sysmon.State(), idle)
	return nil
}

// TestBindFromEnv runs ranks with RIVET_CPU set, as rivetrun -bind-to core
// does: every thread ends up on that CPU and GOMAXPROCS is 1 as soon as
// Init returns, not when the runtime next looks at the CPU mask (its own
// look is turned off here, so only Init can have done it). A GOMAXPROCS
// in the environment wins, and a RIVET_CPU that is not a CPU number is
// an error. Pinned, the runtime's monitor thread, and it alone, runs
// under SCHED_IDLE unless RIVET_SYSMON=normal.
func TestBindFromEnv(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to see GOMAXPROCS come down")
	}
	n := runtime.NumCPU()
	out := runOK(t, 2, "bind", "RIVET_CPU=1", "GODEBUG=updatemaxprocs=0")
	for r := 0; r < 2; r++ {
		if want := fmt.Sprintf("rank %d: cpus [1] gomaxprocs %d -> 1, sysmon idle (1 idle)\n", r, n); !strings.Contains(out, want) {
			t.Errorf("RIVET_CPU=1: want %q in\n%s", want, out)
		}
	}
	out = runOK(t, 2, "bind", "RIVET_CPU=0", "GOMAXPROCS=3")
	for r := 0; r < 2; r++ {
		if want := fmt.Sprintf("rank %d: cpus [0] gomaxprocs 3 -> 3, sysmon idle (1 idle)\n", r); !strings.Contains(out, want) {
			t.Errorf("RIVET_CPU=0 GOMAXPROCS=3: want %q in\n%s", want, out)
		}
	}
	out = runOK(t, 2, "bind", "RIVET_CPU=1", "RIVET_SYSMON=normal")
	for r := 0; r < 2; r++ {
		if want := fmt.Sprintf("rank %d: cpus [1] gomaxprocs %d -> 1, sysmon normal (0 idle)\n", r, n); !strings.Contains(out, want) {
			t.Errorf("RIVET_CPU=1 RIVET_SYSMON=normal: want %q in\n%s", want, out)
		}
	}
	_, errs, st := runJob(t, 1, "bind", false, "RIVET_SYSMON=low")
	if st == 0 || !strings.Contains(errs, `fabric: sysmon: RIVET_SYSMON="low": want idle, normal or auto`) {
		t.Errorf("RIVET_SYSMON=low: status %d, stderr:\n%s", st, errs)
	}
	_, errs, st = runJob(t, 1, "bind", false, "RIVET_CPU=first")
	if st == 0 || !strings.Contains(errs, `RIVET_CPU="first" is not a CPU number`) {
		t.Errorf("RIVET_CPU=first: status %d, stderr:\n%s", st, errs)
	}
}
