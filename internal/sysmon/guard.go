//go:build linux

package sysmon

import (
	"os"
	"runtime/metrics"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// guardPeriod is how often the guard asks the runtime how many threads
// it has made; it scans them only when the count grew.
const guardPeriod = 50 * time.Millisecond

// guard gives the normal policy back to the threads the demoted monitor
// starts. A thread inherits its creator's policy — SCHED_FLAG_RESET_ON_FORK
// resets only real-time policies and negative nice values — and the
// monitor starts one whenever it takes a P back from a system call and
// finds no idle thread to hand it to. Left alone, such a thread may end
// up running the rank's polling loop under SCHED_IDLE. Each thread is
// looked at once, when first seen, so a thread the program lowers later
// keeps its policy.
func guard(monitor int, seen map[int]bool) {
	sample := []metrics.Sample{{Name: "/sched/threads/total:threads"}}
	var made uint64
	again := 0 // scans still owed after the count last changed
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 || sample[0].Value.Uint64() != made {
			if sample[0].Value.Kind() == metrics.KindUint64 {
				made = sample[0].Value.Uint64()
			}
			// The runtime counts a thread before it clones it: a scan
			// right after the count moved may not find it yet, and the
			// count will not move again for it.
			again = 3
		}
		if again > 0 {
			again--
			seen = restore(monitor, seen)
		}
		time.Sleep(guardPeriod)
	}
}

// restore resets every thread not in seen, other than the monitor, that
// runs under SCHED_IDLE, and returns the threads alive now.
func restore(monitor int, seen map[int]bool) map[int]bool {
	now := threads()
	if now == nil {
		return seen
	}
	for tid := range now {
		if tid == monitor || seen[tid] {
			continue
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy == unix.SCHED_IDLE {
			attr.Policy = unix.SCHED_NORMAL
			unix.SchedSetAttr(tid, attr, 0) // a thread that exited meanwhile needs nothing
		}
	}
	return now
}

// threads returns the process's threads now, nil if /proc cannot say.
func threads() map[int]bool {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	now := make(map[int]bool, len(tasks))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			now[tid] = true
		}
	}
	return now
}
