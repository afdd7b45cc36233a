package testutil

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinnedEnv marks the image PinProcess executed, with the CPU it pinned.
const pinnedEnv = "RIVET_TEST_PINNED"

// PinProcess confines every thread of this process to cpu, as a
// launcher's binding does before a process starts: it executes the
// program again, same arguments and environment, from a thread confined
// to cpu, and returns in the new image, whose every thread inherits that
// thread's mask. Narrowing the threads one by one instead races with the
// threads the runtime starts meanwhile: one started by a thread not yet
// narrowed keeps the wide mask. Call it before anything a new image
// would not repeat.
func PinProcess(cpu int) error {
	mark := strconv.Itoa(cpu)
	if os.Getenv(pinnedEnv) == mark {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("pinning to CPU %d: %w", cpu, err)
	}
	// The thread that executes is the one whose mask the image inherits.
	runtime.LockOSThread()
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("pinning to CPU %d: %w", cpu, os.NewSyscallError("sched_setaffinity", err))
	}
	err = unix.Exec(exe, os.Args, append(os.Environ(), pinnedEnv+"="+mark))
	// The thread keeps its narrow mask: it stays locked rather than
	// carry the mask into other goroutines.
	return fmt.Errorf("pinning to CPU %d: %w", cpu, os.NewSyscallError("execve", err))
}
