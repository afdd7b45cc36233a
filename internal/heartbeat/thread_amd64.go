//go:build linux

package heartbeat

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Independent reports whether the heartbeat runs outside the Go
// scheduler, so that no goroutine can delay it.
const Independent = true

// spawn clones a thread that runs the heartbeat loop over a (at the
// bottom of its mapping) on the stack that ends at stack, with every
// signal blocked (thread_amd64.s). It returns the thread's id, or the
// error number.
//
//go:noescape
func spawn(a unsafe.Pointer, stack uintptr) (tid int, errno uintptr)

func (b *Beat) start() error {
	top := uintptr(unsafe.Pointer(&b.mem[0])) + uintptr(len(b.mem))
	// CLONE_PARENT_SETTID stores the thread's id in a.tid before clone
	// returns, so Stop never mistakes a thread that has not started for
	// one that has exited.
	tid, errno := spawn(unsafe.Pointer(b.a), top&^15)
	if errno != 0 {
		return fmt.Errorf("heartbeat: clone: %w", unix.Errno(errno))
	}
	// The thread inherits its creator's scheduling policy, and a Go
	// thread the runtime's monitor started under process tuning runs
	// SCHED_IDLE (reset-on-fork does not reset that policy): a beat that
	// waits for an idle CPU is a false suspicion. It runs as a normal
	// thread, whoever made it.
	// It keeps the process's nice value: asking an unprivileged
	// process's thread for nice 0 would fail whole, policy and all.
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	if prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0); err == nil {
		attr.Nice = int32(20 - prio) // the system call returns 40..1 for nice -20..19
	}
	unix.SchedSetAttr(tid, &attr, 0)
	return nil
}
