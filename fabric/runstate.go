//go:build linux

package fabric

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/heartbeat"
)

// A Runstate is what this node's kernel says of a process's heartbeat
// thread: whether a heartbeat that stands still belongs to a process
// that cannot run (stopped, frozen, gone) or to one that waits for a CPU
// (docs/ft.md, what a verdict rests on).
type Runstate int

const (
	// RunUnknown: the process is not on this node, or the kernel's
	// answer cannot be read.
	RunUnknown Runstate = iota
	// RunWaiting: the thread is runnable (R), or in the kernel (D) for
	// anything but a freezer: it waits for a CPU (a busy machine, a
	// throttled cgroup) or for memory — the machine owes it time.
	RunWaiting
	// RunAsleep: the thread sleeps (S). Between beats it does; asleep
	// through a whole timeout, its cgroup is frozen (cgroup v2 freezer).
	RunAsleep
	// RunFrozen: held by the cgroup v1 freezer.
	RunFrozen
	// RunStopped: stopped or traced (T, t): SIGSTOP, a debugger, a
	// suspended job.
	RunStopped
	// RunGone: the thread has exited, or its process is a zombie.
	RunGone
)

func (r Runstate) String() string {
	switch r {
	case RunWaiting:
		return "waiting to run"
	case RunAsleep:
		return "asleep"
	case RunFrozen:
		return "frozen"
	case RunStopped:
		return "stopped"
	case RunGone:
		return "gone"
	}
	return "unknown"
}

// beatID is where a process's heartbeat thread is in /proc, and in which
// pid namespace.
type beatID struct {
	pid, tid int
	ns       uint64
}

// HeartbeatRunstate returns what this node's kernel says of world rank
// w's heartbeat thread, and when it said it (after the answer was read):
// RunUnknown for a process on another node, in another pid namespace, or
// whose heartbeat is not a thread of its own (heartbeat.Independent). It
// reads /proc; a detector asks it only before a verdict.
func (ep *Endpoint) HeartbeatRunstate(w int) (Runstate, time.Time) {
	id, ok := ep.beatIDs[w]
	if !ok || !heartbeat.Independent || id.ns != pidNamespace() {
		return RunUnknown, time.Now()
	}
	rs := threadRunstate(id.pid, id.tid)
	return rs, time.Now()
}

// threadRunstate reads /proc/PID/task/TID/stat's state letter (and, for
// D, its wait channel).
func threadRunstate(pid, tid int) Runstate {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/"
	b, err := os.ReadFile(dir + "stat")
	if err != nil {
		if os.IsNotExist(err) || err == unix.ESRCH {
			return RunGone
		}
		return RunUnknown
	}
	// "TID (comm) S …": the name may hold anything, parentheses too.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return RunUnknown
	}
	switch b[i+2] {
	case 'R':
		return RunWaiting
	case 'D':
		if wchan, err := os.ReadFile(dir + "wchan"); err == nil && string(wchan) == "__refrigerator" {
			return RunFrozen
		}
		return RunWaiting
	case 'S':
		return RunAsleep
	case 'T', 't':
		return RunStopped
	case 'Z', 'X', 'x':
		return RunGone
	}
	return RunUnknown
}

// pidNamespace is the inode of this process's pid namespace, 0 if it
// cannot be read: processes on a node read each other's /proc entries by
// pid only within one namespace.
func pidNamespace() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// beatID is this process's "beat" key: its pid, its heartbeat thread's
// id and its pid namespace ("0 0 0" without a heartbeat thread).
func (ep *Endpoint) beatID() []byte {
	id := beatID{}
	if ep.beat != nil && heartbeat.Independent {
		if tid := ep.beat.Thread(); tid != 0 {
			id = beatID{os.Getpid(), tid, pidNamespace()}
		}
	}
	return fmt.Appendf(nil, "%d %d %d", id.pid, id.tid, id.ns)
}

// learnBeatIDs reads the "beat" keys of the other processes on this node,
// whose pids (by ep.node's order) the "node" keys gave.
func (ep *Endpoint) learnBeatIDs(ctx context.Context, pids []int) error {
	if len(ep.node) < 2 || ep.beat == nil {
		return nil
	}
	ep.beatIDs = make(map[int]beatID, len(ep.node)-1)
	for i, w := range ep.node {
		if w == ep.rank {
			continue
		}
		v, err := ep.boot.Get(ctx, w, "beat")
		if err != nil {
			return err
		}
		var id beatID
		if _, err := fmt.Sscanf(string(v), "%d %d %d", &id.pid, &id.tid, &id.ns); err != nil || id.pid != 0 && id.pid != pids[i] {
			return fmt.Errorf("fabric: rank %d published a bad beat key %q", w, v)
		}
		if id.tid != 0 && id.ns != 0 {
			ep.beatIDs[w] = id
		}
	}
	return nil
}
