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
)

func init() {
	progs["bind"] = progBind
	preInit["bind"] = func() { bindStartProcs = runtime.GOMAXPROCS(0) }
}

// bindStartProcs is GOMAXPROCS before Init, in a "bind" rank.
var bindStartProcs int

// progBind reports what Init did with RIVET_CPU: the CPUs every thread
// may run on, and GOMAXPROCS before and after.
func progBind(ctx context.Context, ep *Endpoint) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	cpus := map[string]bool{}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
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
	fmt.Printf("rank %d: cpus %v gomaxprocs %d -> %d\n", ep.World().Rank(), masks, bindStartProcs, runtime.GOMAXPROCS(0))
	return nil
}

// TestBindFromEnv runs ranks with RIVET_CPU set, as rivetrun -bind-to core
// does: every thread ends up on that CPU and GOMAXPROCS is 1 as soon as
// Init returns, not when the runtime next looks at the CPU mask (its own
// look is turned off here, so only Init can have done it). A GOMAXPROCS
// in the environment wins, and a RIVET_CPU that is not a CPU number is
// an error.
func TestBindFromEnv(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to see GOMAXPROCS come down")
	}
	n := runtime.NumCPU()
	out := runOK(t, 2, "bind", "RIVET_CPU=1", "GODEBUG=updatemaxprocs=0")
	for r := 0; r < 2; r++ {
		if want := fmt.Sprintf("rank %d: cpus [1] gomaxprocs %d -> 1\n", r, n); !strings.Contains(out, want) {
			t.Errorf("RIVET_CPU=1: want %q in\n%s", want, out)
		}
	}
	out = runOK(t, 2, "bind", "RIVET_CPU=0", "GOMAXPROCS=3")
	for r := 0; r < 2; r++ {
		if want := fmt.Sprintf("rank %d: cpus [0] gomaxprocs 3 -> 3\n", r); !strings.Contains(out, want) {
			t.Errorf("RIVET_CPU=0 GOMAXPROCS=3: want %q in\n%s", want, out)
		}
	}
	_, errs, st := runJob(t, 1, "bind", false, "RIVET_CPU=first")
	if st == 0 || !strings.Contains(errs, `RIVET_CPU="first" is not a CPU number`) {
		t.Errorf("RIVET_CPU=first: status %d, stderr:\n%s", st, errs)
	}
}
