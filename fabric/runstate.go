//go:build linux

package fabric

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/internal/heartbeat"
	"github.com/rivet-hpc/rivet/internal/ulfm"
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
	// RunAsleep: the thread sleeps (S), as it does between beats. A
	// sleep past its timer is no evidence of anything: in a virtual
	// machine whose CPU the host holds, the timer's interrupt waits too.
	RunAsleep
	// RunFrozen: its cgroup is frozen (the v1 freezer's FROZEN, v2's
	// cgroup.events "frozen 1"), as a paused container or job is.
	RunFrozen
	// RunStopped: stopped or traced (T, t): SIGSTOP, a debugger, a
	// suspended job.
	RunStopped
	// RunGone: the thread has exited, or its process is a zombie.
	RunGone
)

// String names r as the detector's rules do (the values are the same:
// ft's TestRunstate).
func (r Runstate) String() string { return ulfm.Runstate(r).String() }

// beatID is where a process's heartbeat thread is in /proc, and in which
// pid namespace.
type beatID struct {
	pid, tid int
	ns       uint64
}

// HeartbeatRunstate returns what this node's kernel says of world rank
// w's heartbeat thread now: RunUnknown for a process on another node, in
// another pid namespace, or whose heartbeat is not a thread of its own
// (heartbeat.Independent). It reads /proc; a detector asks it only
// before a verdict.
func (ep *Endpoint) HeartbeatRunstate(w int) Runstate {
	var id beatID
	ok := false
	if m := ep.beatIDs.Load(); m != nil {
		id, ok = (*m)[w]
	}
	if !ok || !heartbeat.Independent || id.ns != pidNamespace() {
		return RunUnknown
	}
	return threadRunstate(id.pid, id.tid)
}

// threadRunstate reads /proc/PID/task/TID/stat's state letter (and, for
// D and S, whether the process's cgroup is frozen).
func threadRunstate(pid, tid int) Runstate {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/"
	b, err := os.ReadFile(dir + "stat")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
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
	case 'D', 'S':
		// A frozen task shows as one or the other (the v1 freezer
		// freezes a sleeping task in place, in D; v2 traps it asleep):
		// its cgroup says so.
		if frozen(pid) {
			return RunFrozen
		}
		if b[i+2] == 'D' {
			return RunWaiting
		}
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

// ownBeatID is where this process's heartbeat thread is: its pid, the
// thread's id and its pid namespace (all 0 without a thread of its own).
func (ep *Endpoint) ownBeatID() beatID {
	if ep.beat != nil && heartbeat.Independent {
		if tid := ep.beat.Thread(); tid != 0 {
			return beatID{os.Getpid(), tid, pidNamespace()}
		}
	}
	return beatID{}
}

// beatID is this process's "beat" key: ownBeatID as "pid tid ns".
func (ep *Endpoint) beatID() []byte {
	id := ep.ownBeatID()
	return fmt.Appendf(nil, "%d %d %d", id.pid, id.tid, id.ns)
}

// addBeatID records where world rank w's heartbeat thread is, from its
// "beat" key (a process a spawn joined).
func (ep *Endpoint) addBeatID(w, pid int, key string) {
	var id beatID
	if _, err := fmt.Sscanf(key, "%d %d %d", &id.pid, &id.tid, &id.ns); err != nil || id.pid != pid || id.tid == 0 || id.ns == 0 {
		return
	}
	ids := map[int]beatID{}
	if m := ep.beatIDs.Load(); m != nil {
		maps.Copy(ids, *m)
	}
	ids[w] = id
	ep.beatIDs.Store(&ids)
}

// learnBeatIDs learns where the heartbeat threads of the other processes
// on this node are, whose pids (by ep.node's order) the node map gave:
// from their segments' headers, or their "beat" keys where this process
// maps no segment of theirs.
func (ep *Endpoint) learnBeatIDs(ctx context.Context, pids []int) error {
	if len(ep.node) < 2 || ep.beat == nil {
		return nil
	}
	ids := make(map[int]beatID, len(ep.node)-1)
	defer ep.beatIDs.Store(&ids)
	for i, w := range ep.node {
		if w == ep.rank {
			continue
		}
		var id beatID
		if ep.shm != nil && ep.shm.PeerWord(w, shmseg.WordBeatID) != nil {
			if tid := atomic.LoadUint64(ep.shm.PeerWord(w, shmseg.WordBeatID)); tid != 0 {
				id = beatID{pids[i], int(tid), atomic.LoadUint64(ep.shm.PeerWord(w, shmseg.WordBeatID+8))}
			}
		} else {
			v, err := ep.boot.Get(ctx, w, "beat")
			if err != nil {
				return err
			}
			if _, err := fmt.Sscanf(string(v), "%d %d %d", &id.pid, &id.tid, &id.ns); err != nil || id.pid != 0 && id.pid != pids[i] {
				return fmt.Errorf("fabric: rank %d published a bad beat key %q", w, v)
			}
		}
		if id.tid != 0 && id.ns != 0 {
			ids[w] = id
		}
	}
	return nil
}

// frozen reports whether process pid's cgroup is frozen: v1's freezer
// state (which reports a frozen parent too), or v2's cgroup.events.
func frozen(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	v1, v2 := cgroupMounts()
	for _, line := range strings.Split(string(b), "\n") {
		// "ID:CONTROLLERS:PATH"
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "" && v2 != "":
			if ev, err := os.ReadFile(v2 + f[2] + "/cgroup.events"); err == nil && strings.Contains(string(ev), "frozen 1") {
				return true
			}
		case v1 != "" && slices.Contains(strings.Split(f[1], ","), "freezer"):
			if st, err := os.ReadFile(v1 + f[2] + "/freezer.state"); err == nil && strings.TrimSpace(string(st)) == "FROZEN" {
				return true
			}
		}
	}
	return false
}

// cgroupMounts returns where the v1 freezer hierarchy and the v2 one are
// mounted ("" for none), read once (a variable, for tests that mount one).
var cgroupMounts = sync.OnceValues(readCgroupMounts)

func readCgroupMounts() (v1, v2 string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		// "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS…] - FSTYPE SOURCE SUPEROPTS"
		pre, post, ok := strings.Cut(line, " - ")
		a, c := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 5 || len(c) < 3 || a[3] != "/" {
			continue
		}
		switch {
		case c[0] == "cgroup2" && v2 == "":
			v2 = a[4]
		case c[0] == "cgroup" && v1 == "" && slices.Contains(strings.Split(c[2], ","), "freezer"):
			v1 = a[4]
		}
	}
	return v1, v2
}
