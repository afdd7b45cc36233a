//go:build linux

package launch

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// startOn starts cmd confined to one CPU from its first instruction. A
// process inherits the CPU mask of the thread that forks it, so the
// calling goroutine takes a thread of its own, narrows that thread's mask
// to cpu, starts the process from it, and widens the mask again — as
// taskset does, without a process in between. Pinning the child after
// it started would leave the threads its runtime had already made on
// every CPU.
func startOn(cmd *exec.Cmd, cpu int) error {
	runtime.LockOSThread()
	// If the mask cannot be widened again the thread stays locked to
	// this goroutine, rather than carry the narrow mask into others.
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("pinning to CPU %d: %w", cpu, os.NewSyscallError("sched_getaffinity", err))
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("pinning to CPU %d: %w", cpu, os.NewSyscallError("sched_setaffinity", err))
	}
	err := cmd.Start()
	if unix.SchedSetaffinity(0, &old) == nil {
		runtime.UnlockOSThread()
	}
	return err
}
