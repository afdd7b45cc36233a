//go:build linux

package fabric

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// bindFromEnv pins every thread of this process to the CPU RIVET_CPU
// names (rivetrun's -bind-to core sets it). Threads the Go runtime starts
// later inherit the mask from the thread that starts them. Without
// pinning, two busy-polling ranks and the runtime's own threads share
// the CPUs as the scheduler likes, and small-message latency varies by
// 3× between runs.
//
// It then brings GOMAXPROCS down to the one CPU at once. The runtime
// would do so itself, but only at its next look at the CPU mask, up to a
// second later: a benchmark's whole timed loop can run before then, with
// a second P, so that each of the runtime's preemptions wakes another
// thread on the rank's CPU to take the goroutine over. A GOMAXPROCS in
// the environment, or a value the program set other than the start-up
// default, is left alone.
func bindFromEnv() error {
	v := os.Getenv("RIVET_CPU")
	if v == "" {
		return nil
	}
	cpu, err := strconv.Atoi(v)
	if err != nil || cpu < 0 {
		return fmt.Errorf("fabric: RIVET_CPU=%q is not a CPU number", v)
	}
	var set unix.CPUSet
	set.Set(cpu)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("fabric: binding to CPU %d: %w", cpu, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("fabric: binding to CPU %d: %w", cpu, os.NewSyscallError("sched_setaffinity", err))
		}
	}
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) == runtime.NumCPU() {
		runtime.SetDefaultGOMAXPROCS()
	}
	return nil
}
