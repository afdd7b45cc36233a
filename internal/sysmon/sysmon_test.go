//go:build linux

package sysmon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A policy set on a thread stays for the life of the process, so each
// case runs in a child: this test binary again, with childEnv naming
// the case.
const childEnv = "SYSMON_TEST_CHILD"

func TestMain(m *testing.M) {
	if c := os.Getenv(childEnv); c != "" {
		if err := children[c](); err != nil {
			fmt.Println("FAIL:", err)
			os.Exit(1)
		}
		fmt.Println("ok")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var children = map[string]func() error{
	"demote":  childDemote,
	"env":     childEnvChoice,
	"inherit": childInherit,
}

// runChild runs case c with env added and returns its output.
func runChild(t *testing.T, c string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// A race-enabled child would otherwise sleep a second at exit.
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + c, "GORACE=atexit_sleep_ms=0"}, env...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestDemote checks, in a child, that the thread Demote lowers is the
// runtime's monitor — the one that wakes every few milliseconds while a
// goroutine spins, where idle threads do not wake at all — and that it
// alone ends up under SCHED_IDLE.
func TestDemote(t *testing.T) {
	out, err := runChild(t, "demote")
	if err != nil || !strings.HasSuffix(out, "ok\n") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
}

func childDemote() error {
	if State() != "normal" || Demoted() != 0 {
		return fmt.Errorf("before Demote: state %s, thread %d", State(), Demoted())
	}
	// A goroutine runs throughout, as a rank's does: a runtime with
	// nothing to run parks its monitor on a futex, not in usleep, and
	// then there is no monitor to find (a loaded machine that kept this
	// process idle long enough made the search fail).
	var stop atomic.Bool
	defer stop.Store(true)
	go func() {
		for !stop.Load() {
		}
	}()
	tid, err := find()
	if err != nil {
		return err
	}
	// The monitor's sleeps shorten to 20 µs and grow back to 10 ms
	// while a goroutine runs: it wakes again and again, a dozen times in
	// 200 ms on a quiet machine; an idle thread, asleep on a futex, never.
	// How soon the kernel runs a woken thread is the scheduler's business
	// (a loaded machine once let it run 9 times in 200 ms), so the test
	// spins until it has seen 10 wakes, for as long as a minute.
	before, err := wakeups(tid)
	if err != nil {
		return err
	}
	start := time.Now()
	woke := 0
	for woke < 10 && time.Since(start) < time.Minute {
		for t0 := time.Now(); time.Since(t0) < 10*time.Millisecond; {
		}
		after, err := wakeups(tid)
		if err != nil {
			return err
		}
		woke = after - before
	}
	fmt.Printf("thread %d woke %d times in %v of spinning\n", tid, woke, time.Since(start).Round(time.Millisecond))
	if woke < 10 {
		return fmt.Errorf("thread %d woke %d times in a minute: not the runtime's monitor", tid, woke)
	}
	got, err := Demote()
	if err != nil || got != tid {
		return fmt.Errorf("Demote: thread %d, %v; want %d", got, err, tid)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		id, _ := strconv.Atoi(task.Name())
		attr, err := unix.SchedGetAttr(id, 0)
		if err != nil {
			continue // the thread has gone
		}
		switch {
		case id == tid && attr.Policy != unix.SCHED_IDLE:
			return fmt.Errorf("monitor %d: policy %d; want SCHED_IDLE", id, attr.Policy)
		case id != tid && attr.Policy != unix.SCHED_NORMAL:
			return fmt.Errorf("thread %d: policy %d; only the monitor should have changed", id, attr.Policy)
		}
	}
	if again, err := Demote(); err != nil || again != tid {
		return fmt.Errorf("second Demote: thread %d, %v; want %d", again, err, tid)
	}
	if State() != "idle" || Demoted() != tid {
		return fmt.Errorf("after Demote: state %s, thread %d", State(), Demoted())
	}
	return nil
}

// TestInherit checks, in a child, that threads the demoted monitor
// starts do not stay under SCHED_IDLE. A thread inherits its creator's
// policy, reset-on-fork resets only real-time policies and negative
// nice values, and the monitor starts a thread whenever it takes a P
// from a system call and finds no idle one to hand it to.
func TestInherit(t *testing.T) {
	out, err := runChild(t, "inherit")
	if err != nil || !strings.HasSuffix(out, "ok\n") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
}

func childInherit() error {
	var stop atomic.Bool
	defer stop.Store(true)
	go func() {
		for !stop.Load() {
		}
	}()
	tid, err := Demote()
	if err != nil {
		return err
	}
	// Goroutines blocked in read(2) hold their Ps until the monitor takes
	// them back and starts threads to run the others.
	threads := func() int {
		tasks, _ := os.ReadDir("/proc/self/task")
		return len(tasks)
	}
	before := threads()
	var fds [][2]int
	for range 8 {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return err
		}
		fds = append(fds, p)
		go func() {
			var b [1]byte
			unix.Read(p[0], b[:])
		}()
	}
	defer func() {
		for _, p := range fds {
			unix.Write(p[1], []byte{0})
			unix.Close(p[1])
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for threads() < before+4 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d threads after 5 s, %d before: the runtime started none", threads(), before)
		}
		time.Sleep(time.Millisecond)
	}
	// The guard resets them within a period of its own; 5 s is many.
	var idle []int
	for deadline = time.Now().Add(5 * time.Second); ; {
		idle = idle[:0]
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			id, _ := strconv.Atoi(task.Name())
			if attr, err := unix.SchedGetAttr(id, 0); err == nil && attr.Policy == unix.SCHED_IDLE && id != tid {
				idle = append(idle, id)
			}
		}
		if len(idle) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("threads %v still SCHED_IDLE after 5 s (monitor %d, %d threads)", idle, tid, threads())
		}
		time.Sleep(time.Millisecond)
	}
	if a, err := unix.SchedGetAttr(tid, 0); err != nil || a.Policy != unix.SCHED_IDLE {
		return fmt.Errorf("monitor %d lost SCHED_IDLE: %v", tid, err)
	}
	fmt.Printf("%d threads, %d before; only the monitor %d is SCHED_IDLE\n", threads(), before, tid)
	return nil
}

// wakeups is a thread's count of voluntary context switches: one per
// sleep it wakes from.
func wakeups(tid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("no voluntary_ctxt_switches in " + string(b))
}

// childEnvChoice pins its thread to CPU 0 if SYSMON_TEST_PIN is set,
// then prints what FromEnv did.
func childEnvChoice() error {
	runtime.LockOSThread()
	if os.Getenv("SYSMON_TEST_PIN") != "" {
		var set unix.CPUSet
		set.Set(0)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return err
		}
	}
	err := FromEnv()
	fmt.Printf("sysmon %s, err %v\n", State(), err)
	return nil
}

// TestFromEnv checks each RIVET_SYSMON choice: auto lowers the monitor
// only on a process that runs on one CPU, idle always, normal never, and
// anything else is an error.
func TestFromEnv(t *testing.T) {
	unpinned := "normal" // an unpinned process runs on every CPU
	if runtime.NumCPU() == 1 {
		unpinned = "idle"
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{EnvVar + "="}, "sysmon " + unpinned + ", err <nil>"},
		{[]string{EnvVar + "=", "SYSMON_TEST_PIN=1"}, "sysmon idle, err <nil>"},
		{[]string{EnvVar + "=auto", "SYSMON_TEST_PIN=1"}, "sysmon idle, err <nil>"},
		{[]string{EnvVar + "=normal", "SYSMON_TEST_PIN=1"}, "sysmon normal, err <nil>"},
		{[]string{EnvVar + "=idle"}, "sysmon idle, err <nil>"},
		{[]string{EnvVar + "=low"}, `sysmon normal, err RIVET_SYSMON: sysmon: "low": want idle, normal or auto`},
	} {
		out, err := runChild(t, "env", c.env...)
		if err != nil || !strings.Contains(out, c.want+"\n") {
			t.Errorf("%v: %v\n%s\nwant %q", c.env, err, out, c.want)
		}
	}
}

func TestSyscallPC(t *testing.T) {
	for s, want := range map[string]uintptr{
		"35 0xc000047f20 0x0 0x0 0x0 0x0 0x0 0x7f2a1c7fbd88 0x4729ee\n": 0x4729ee,
		"running\n":                           0,
		"-1 0x7ffd1b0c3a08 0x4729ee\n":        0,
		"35 0x1 0x0 0x0 0x0 0x0 0x0 0x2 zz\n": 0,
	} {
		pc, ok := syscallPC(s)
		if pc != want || ok != (want != 0) {
			t.Errorf("syscallPC(%q) = %#x, %v; want %#x", s, pc, ok, want)
		}
	}
}
