//go:build linux

// Package sysmon lowers the Go runtime's monitor thread to the kernel's
// SCHED_IDLE policy on processes confined to one CPU.
//
// The runtime's monitor ("sysmon") is a thread of its own, without a P,
// that wakes every 10 ms while a goroutine runs: to preempt it, to poll
// the network and to take Ps back from system calls. On a rank pinned to
// one CPU each wake-up preempts the rank's busy-polling thread on the
// spot. Under emulation such a wake costs 150–220 µs of the poll
// thread's time, about 2% of each rank's CPU, and a ping-pong has both
// ranks on its critical path (docs/fabric.md, process tuning).
//
// Under SCHED_IDLE a waking thread never preempts a normal one: the
// monitor runs when the CPU would otherwise be idle — whenever the rank
// blocks — or when the fair scheduler's accounting gives it a turn (its
// weight is 3 against a normal thread's 1024), so its wakes come less
// often and at the scheduler's tick. Nothing it does is lost, only
// delayed while the rank polls: preemption of a goroutine that runs
// long (the rank's own waits yield to other goroutines anyway), the
// periodic garbage collection, and the network poll — so a goroutine
// parked on the netpoller waits for the monitor's turn until the rank
// blocks or sleeps and the scheduler polls the network itself.
//
// The runtime does not say which thread is its monitor. It is the one
// thread asleep in nanosleep(2) from runtime.usleep, read from
// /proc/self/task/TID/syscall and the runtime's own symbol table; idle
// threads sleep on futexes instead.
package sysmon

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrNotFound is returned when no thread looks like the runtime's monitor.
var ErrNotFound = errors.New("sysmon: the Go runtime's monitor thread was not found")

// EnvVar chooses what FromEnv does: "idle" lowers the monitor, "normal"
// leaves it alone, and unset (or "auto") lowers it when the process may
// run on one CPU only.
const EnvVar = "RIVET_SYSMON"

// demoted is the thread Demote lowered, 0 if none; mu makes concurrent
// Demotes lower it once.
var (
	demoted atomic.Int64
	mu      sync.Mutex
)

// scans bounds the search: a scan that finds the monitor runnable rather
// than asleep yields the CPU to it and looks again. A scan takes some
// 50 µs; on a loaded machine 64 of them once missed the monitor, whose
// sleeps and wakes a descheduled search straddles, so the bound is wide
// (it costs nothing when the monitor is found at once).
const scans = 1024

// FromEnv applies EnvVar's choice (see Apply).
func FromEnv() error {
	if err := Apply(os.Getenv(EnvVar)); err != nil {
		return fmt.Errorf("%s: %w", EnvVar, err)
	}
	return nil
}

// Apply lowers the monitor as mode says: "idle" always, "auto" (or "")
// when the process may run on one CPU only, "normal" never. In "auto" a
// monitor that cannot be found or lowered is left as it is, and Apply
// returns nil: the setting only makes things faster. Asked for by name,
// it must succeed.
func Apply(mode string) error {
	switch mode {
	case "normal":
		return nil
	case "idle":
		if _, err := Demote(); err != nil {
			return fmt.Errorf("sysmon: idle: %w", err)
		}
		return nil
	case "", "auto":
		if !oneCPU() {
			return nil
		}
		Demote()
		return nil
	}
	return fmt.Errorf("sysmon: %q: want idle, normal or auto", mode)
}

// oneCPU reports whether the calling thread may run on one CPU only, as
// a rank pinned by rivetrun or mpirun --bind-to core.
func oneCPU() bool {
	var set unix.CPUSet
	return unix.SchedGetaffinity(0, &set) == nil && set.Count() == 1
}

// Demote finds the runtime's monitor thread and sets its policy to
// SCHED_IDLE, and starts a guard that gives the normal policy back to
// the threads the monitor starts (see guard). It returns the thread's
// ID. Calling it again returns the same thread.
func Demote() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if tid := demoted.Load(); tid != 0 {
		return int(tid), nil
	}
	tid, err := find()
	if err != nil {
		return 0, err
	}
	before := threads()
	attr := unix.SchedAttr{Policy: unix.SCHED_IDLE}
	if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
		return 0, fmt.Errorf("sysmon: thread %d: %w", tid, os.NewSyscallError("sched_setattr", err))
	}
	demoted.Store(int64(tid))
	go guard(tid, before)
	return tid, nil
}

// Demoted returns the thread Demote lowered, or 0 if it has not.
func Demoted() int { return int(demoted.Load()) }

// State is "idle" once Demote has lowered the monitor and "normal"
// before, for benchmark headers.
func State() string {
	if Demoted() != 0 {
		return "idle"
	}
	return "normal"
}

// find returns the one thread asleep in runtime.usleep, seen so in two
// scans in a row. Between scans it yields the CPU: on a pinned rank the
// monitor may be runnable, waiting for the very CPU this thread holds,
// or in its deep sleep, from which the system calls of a scan wake it.
func find() (int, error) {
	self := unix.Gettid()
	last := 0
	for range scans {
		tid, err := scan(self)
		if err != nil {
			return 0, err
		}
		if tid != 0 && tid == last {
			return tid, nil
		}
		last = tid
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
	return 0, ErrNotFound
}

// scan returns the one thread other than self asleep in runtime.usleep,
// or 0 if there is none or more than one.
func scan(self int) (int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("sysmon: %w", err)
	}
	found := 0
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil || tid == self {
			continue
		}
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/syscall")
		if err != nil {
			continue // the thread exited
		}
		if pc, ok := syscallPC(string(b)); ok && funcName(pc) == "runtime.usleep" {
			if found != 0 {
				return 0, nil
			}
			found = tid
		}
	}
	return found, nil
}

// syscallPC parses /proc/PID/task/TID/syscall: "NR ARG1 … ARG6 SP PC"
// for a thread blocked in a system call, "-1 SP PC" for one blocked
// elsewhere, "running" for one that is not blocked.
func syscallPC(s string) (uintptr, bool) {
	f := strings.Fields(s)
	if len(f) != 9 {
		return 0, false
	}
	pc, err := strconv.ParseUint(strings.TrimPrefix(f[8], "0x"), 16, 64)
	if err != nil {
		return 0, false
	}
	return uintptr(pc), true
}

func funcName(pc uintptr) string {
	if f := runtime.FuncForPC(pc); f != nil {
		return f.Name()
	}
	return ""
}
