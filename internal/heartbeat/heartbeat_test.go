//go:build linux

package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// words maps n words outside the Go heap, as a heartbeat needs them.
func words(t *testing.T, n int) []uint64 {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), n)
}

// TestBeat: every word moves at the period's pace, together; Stop ends
// the thread, after which nothing moves.
func TestBeat(t *testing.T) {
	w := words(t, 2)
	b, err := Start(Config{Period: 5 * time.Millisecond, Words: []*uint64{&w[0], &w[1]}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	// 40 beats are due; the thread sleeps in between, so only a host
	// that left it unscheduled for most of 200 ms gives fewer than 10.
	a0, a1 := atomic.LoadUint64(&w[0]), atomic.LoadUint64(&w[1])
	if a0 < 10 || a1+1 < a0 || a0+1 < a1 {
		t.Errorf("after 200 ms of 5 ms beats: %d and %d", a0, a1)
	}
	tid := atomic.LoadUint32(&b.a.tid)
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	if _, err := os.Stat(task); Independent && err != nil {
		t.Errorf("the heartbeat's thread %d: %v", tid, err)
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != ErrStopped {
		t.Errorf("a second Stop: %v", err)
	}
	end := atomic.LoadUint64(&w[0])
	time.Sleep(30 * time.Millisecond)
	if got := atomic.LoadUint64(&w[0]); got != end {
		t.Errorf("the word moved from %d to %d after Stop", end, got)
	}
	if _, err := os.Stat(task); Independent && !os.IsNotExist(err) {
		t.Errorf("the heartbeat's thread %d after Stop: %v", tid, err)
	}
}

func TestBadInput(t *testing.T) {
	w := words(t, 2)
	odd := (*uint64)(unsafe.Add(unsafe.Pointer(&w[0]), 4))
	ms, one := time.Millisecond, []*uint64{&w[0]}
	for _, c := range []Config{{Words: one}, {Period: ms}, {Period: ms, Words: []*uint64{nil}}, {Period: ms, Words: []*uint64{odd}},
		{Period: ms, Words: make([]*uint64, MaxWords+1)}, {Period: ms, Words: one, Fences: []*uint64{odd}},
		{Period: ms, Words: one, Status: 256}, {Period: ms, Words: one, Message: strings.Repeat("x", maxMessage+1)}} {
		if b, err := Start(c); err == nil {
			b.Stop()
			t.Errorf("Start(%+v) accepted", c)
		}
	}
}

// TestIndependent: a process confined to one CPU, GOMAXPROCS 1, whose
// only goroutine computes without a function call and without
// asynchronous preemption — where a goroutine's ticker never runs —
// still beats: the computation waits for 100 beats, and ends.
func TestIndependent(t *testing.T) {
	if !Independent {
		t.Skip("the heartbeat is a goroutine on " + runtime.GOARCH)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSpinChild$", "-test.v")
	cmd.Env = append(os.Environ(), "HEARTBEAT_SPIN=1", "GOMAXPROCS=1", "GODEBUG=asyncpreemptoff=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the spinning process: %v (a heartbeat the computation can delay never ends it)\n%s", err, out)
	}
	i := strings.Index(string(out), "ticks=")
	if i < 0 {
		t.Fatalf("no report:\n%s", out)
	}
	var ticks int
	var took time.Duration
	if _, err := fmt.Sscanf(string(out[i:]), "ticks=%d took=%d", &ticks, &took); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("100 beats of 10 ms in %v while computing; a goroutine's ticker ticked %d times meanwhile", took.Round(time.Millisecond), ticks)
	// The scenario starves goroutines: without the race detector the
	// ticker never runs (0); its instrumented atomics let one tick by.
	if ticks > 10 {
		t.Errorf("the goroutine ticker ran %d times during the computation: the test does not starve goroutines", ticks)
	}
}

// TestFence: a process whose fence word is set ends with the message
// and status asked for, even while its one goroutine computes without
// yielding.
func TestFence(t *testing.T) {
	if !Independent {
		t.Skip("the heartbeat is a goroutine on " + runtime.GOARCH)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSpinChild$")
	cmd.Env = append(os.Environ(), "HEARTBEAT_SPIN=1", "HEARTBEAT_FENCE=1", "GOMAXPROCS=1", "GODEBUG=asyncpreemptoff=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 42 || !strings.Contains(string(out), "fenced out") {
		t.Fatalf("a fenced process: %v (want exit status 42 and its message)\n%s", err, out)
	}
}

// TestLayout: the offsets thread_amd64.s reads the arguments at.
func TestLayout(t *testing.T) {
	var a args
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{{"stop", unsafe.Offsetof(a.stop), 0}, {"tid", unsafe.Offsetof(a.tid), 8}, {"period", unsafe.Offsetof(a.period), 16},
		{"n", unsafe.Offsetof(a.n), 32}, {"words", unsafe.Offsetof(a.words), 40}, {"nf", unsafe.Offsetof(a.nf), 72},
		{"fences", unsafe.Offsetof(a.fences), 80}, {"status", unsafe.Offsetof(a.status), 112},
		{"msgLen", unsafe.Offsetof(a.msgLen), 120}, {"msg", unsafe.Offsetof(a.msg), 128}} {
		if c.got != c.want {
			t.Errorf("args.%s at %d, thread_amd64.s reads it at %d", c.name, c.got, c.want)
		}
	}
}

// TestSpinChild is TestIndependent's process; on its own it does
// nothing.
func TestSpinChild(t *testing.T) {
	if os.Getenv("HEARTBEAT_SPIN") != "1" {
		return
	}
	// Every thread on one CPU, as rivetrun -bind-to core places a rank.
	cpus, err := testutil.CPUs()
	if err == nil {
		err = testutil.PinProcess(cpus[0])
	}
	if err != nil {
		t.Fatal(err)
	}
	w := words(t, 2)
	var ticks atomic.Int64
	go func() {
		for range time.Tick(10 * time.Millisecond) {
			ticks.Add(1)
		}
	}()
	runtime.Gosched()
	c := Config{Period: 10 * time.Millisecond, Words: []*uint64{&w[0]}}
	fenced := os.Getenv("HEARTBEAT_FENCE") == "1"
	if fenced {
		c.Fences, c.Message, c.Status = []*uint64{&w[1]}, "fenced out\n", 42
	}
	b, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if fenced {
		// Declared failed while computing: only the heartbeat's thread
		// can end this.
		atomic.StoreUint64(&w[1], 1)
		for atomic.LoadUint64(&w[1]) != 0 {
		}
	}
	start := time.Now()
	t0 := ticks.Load()
	for atomic.LoadUint64(&w[0]) < 100 {
	}
	fmt.Printf("ticks=%d took=%d\n", ticks.Load()-t0, time.Since(start))
}

// TestBeatFromIdleThread: a heartbeat made from a thread under
// SCHED_IDLE (as Go threads the demoted runtime monitor started are) still
// runs as a normal thread.
func TestBeatFromIdleThread(t *testing.T) {
	if !Independent {
		t.Skip("the heartbeat is a goroutine on " + runtime.GOARCH)
	}
	if err := idleBeat(); err != nil {
		t.Fatal(err)
	}
}

func idleBeat() error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // a thread of its own, not given back to the runtime
		me := unix.Gettid()
		// Nice 7, as a job started at a low priority: the heartbeat keeps
		// it (an unprivileged thread cannot ask for less, and a request
		// that asked would fail whole, leaving SCHED_IDLE in place).
		if err := unix.Setpriority(unix.PRIO_PROCESS, me, 7); err != nil {
			errc <- err
			return
		}
		if err := unix.SchedSetAttr(me, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE, Nice: 7}, 0); err != nil {
			errc <- err
			return
		}
		mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Munmap(mem)
		b, err := Start(Config{Period: time.Millisecond, Words: []*uint64{(*uint64)(unsafe.Pointer(&mem[0]))}})
		if err != nil {
			errc <- err
			return
		}
		defer b.Stop()
		attr, err := unix.SchedGetAttr(b.Thread(), 0)
		if err == nil && (attr.Policy != unix.SCHED_NORMAL || attr.Nice != 7) {
			err = fmt.Errorf("a heartbeat made from a SCHED_IDLE thread at nice 7 runs under policy %d at nice %d", attr.Policy, attr.Nice)
		}
		errc <- err
	}()
	return <-errc
}
