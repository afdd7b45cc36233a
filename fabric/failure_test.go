//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

func init() {
	progs.Add("kill", progKill)
	progs.Add("crash", progCrash)
	progs.Add("byebye", progByeBye)
	progs.Add("dieearly", func(context.Context, *Endpoint) error { return nil })
	progs.BeforeInit("dieearly", func() {
		testHookBeforeUnlink = func(ep *Endpoint) {
			if ep.rank == 1 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	})
}

// progKill: rank 2 tells rank 0 the time and SIGKILLs itself, with rank
// 0 blocked in a receive from it and rank 1 in a rendezvous send to it.
// Both get a PeerError matching ErrProcFailed, promptly, and still talk
// to each other.
func progKill(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	switch w.Rank() {
	case 2:
		// Rank 1's request to send has arrived once Probe sees it.
		_, err := w.Probe(ctx, 1, 2)
		must(err, "probe rank 1's send")
		now := time.Now().UnixNano()
		must(w.Send(ctx, []byte(strconv.FormatInt(now, 10)), 0, 1), "send time")
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case 0:
		buf := make([]byte, 32)
		st, err := w.Recv(ctx, buf, 2, 1)
		must(err, "recv time")
		sent, _ := strconv.ParseInt(string(buf[:st.Count]), 10, 64)
		_, err = w.Recv(ctx, buf, 2, 2)
		took := time.Since(time.Unix(0, sent))
		var pe *PeerError
		if !errors.Is(err, ErrProcFailed) || !errors.As(err, &pe) || pe.Rank != 2 {
			failf("receive from the killed rank: %v", err)
		}
		fmt.Printf("receive failed %v after the kill: %v\n", took.Round(time.Microsecond), err)
		if took > 2*time.Second {
			failf("the failure took %v to notice", took)
		}
		// Blocking: raises ErrProcFailed, not pending (§16.2.2; the
		// semantics table is ft's TestSemantics).
		if _, err := w.Recv(ctx, buf, AnySource, 3); !errors.Is(err, ErrProcFailed) || errors.Is(err, ErrProcFailedPending) {
			failf("blocking receive from AnySource with a failed member: %v", err)
		}
		if f := ep.Failed(); !slices.Equal(f, []int{2}) {
			failf("Failed() = %v", f)
		}
	case 1:
		err := w.Send(ctx, make([]byte, 1<<20), 2, 2)
		if !errors.Is(err, ErrProcFailed) {
			failf("rendezvous send to the killed rank: %v", err)
		}
	}
	// The survivors still talk.
	peer := 1 - w.Rank()
	got := make([]byte, 1)
	if _, err := w.Sendrecv(ctx, []byte{byte(w.Rank())}, peer, 9, got, peer, 9); err != nil || int(got[0]) != peer {
		failf("survivors: %v", err)
	}
	return nil
}

func TestPeerKilled(t *testing.T) {
	out, errs, st := runJob(t, 3, "kill", true)
	if st != 128+9 {
		t.Fatalf("status %d, want 137 (rank 2 killed)\n%s\n%s", st, out, errs)
	}
	for r := 0; r < 2; r++ {
		if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
			t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
		}
	}
	if m := regexp.MustCompile(`receive failed (\S+) after the kill`).FindStringSubmatch(out); m != nil {
		t.Logf("rank 0 noticed the failure %s after rank 2's last message", m[1])
	}
	if !strings.Contains(errs, "rank 2 was killed by signal 9") {
		t.Errorf("rivetrun did not report the failure:\n%s", errs)
	}
}

// progCrash: rank 1 dies mid-job, without -ft, while rank 0 waits.
func progCrash(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	if w.Rank() == 1 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	_, err := w.Recv(ctx, make([]byte, 1), 1, 0)
	return err
}

func shmFiles(t *testing.T) []string {
	names, err := filepath.Glob("/dev/shm/rivet-*")
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestSegmentsGoneAfterCrash: whether a rank dies after start-up or
// between creating its segment and unlinking it, nothing is left in
// /dev/shm once the job is over.
func TestSegmentsGoneAfterCrash(t *testing.T) {
	before := shmFiles(t)
	for _, prog := range []string{"crash", "dieearly"} {
		out, errs, st := runJob(t, 3, prog, false)
		if st == 0 {
			t.Fatalf("%s: the job succeeded\n%s\n%s", prog, out, errs)
		}
		// Left behind: a new segment whose creator is dead, as every
		// rank of the job is by now. (Other packages' tests run jobs at
		// the same time; their live ranks' segments are theirs.)
		var left []string
		for _, n := range shmFiles(t) {
			if !slices.Contains(before, n) && shmseg.Orphaned(n) {
				left = append(left, n)
			}
		}
		if len(left) > 0 {
			t.Errorf("%s: left behind %v\n%s", prog, left, errs)
		}
	}
}

// TestStaleSegmentSweep: a segment whose creator is dead is removed by
// the next job's start-up; a live one is not.
func TestStaleSegmentSweep(t *testing.T) {
	dead := exec0(t)
	deadPath := fmt.Sprintf("/dev/shm/rivet-test-r0-p%d-00ff", dead)
	livePath := fmt.Sprintf("/dev/shm/rivet-test-r0-p%d-00ff", os.Getpid())
	for _, p := range []string{deadPath, livePath} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
	}
	s, err := newShmSegment("rivet-test", 0, 2, 2, 64, 0, [8]byte{0xff})
	if err != nil {
		t.Fatal(err)
	}
	path := s.Path()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("segment %s: %v, mode %v (want 0600)", path, err, fi.Mode())
	}
	s.close()
	if _, err := os.Stat(deadPath); !os.IsNotExist(err) {
		t.Errorf("a dead process's segment survived: %v", err)
	}
	if _, err := os.Stat(livePath); err != nil {
		t.Errorf("a live process's segment was removed: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("close left the segment: %v", err)
	}
}

// exec0 returns the pid of a process that has exited and been reaped.
func exec0(t *testing.T) int {
	var attr syscall.ProcAttr
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &attr)
	if err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, 0, nil)
	return pid
}

// TestLauncherNotice: rivetrun -ft's notices mark ranks failed and fail
// the receives that waited on them.
func TestLauncherNotice(t *testing.T) {
	e := newEngine(0, 3)
	ep := &Endpoint{e: e, rank: 0, size: 3}
	c := newComm(ep, 0, 0, allRanks(3))
	e.mu.Lock()
	o := e.get()
	c.postRecv(o, make([]byte, 4), 2, 0, 0)
	r := e.handle(o)
	e.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	rd, wr := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	done := make(chan struct{})
	go func() { watchLauncher(e, rd); close(done) }()
	fmt.Fprintf(wr, "garbage line\nfailed rank=2 status=137 time=%d\n", time.Now().UnixNano())
	wr.Close()
	<-done
	rd.Close()
	_, err := r.Wait(context.Background())
	var pe *PeerError
	if !errors.Is(err, ErrProcFailed) || !errors.As(err, &pe) || pe.Rank != 2 || !strings.Contains(err.Error(), "signal 9") {
		t.Fatalf("receive from the failed rank: %v", err)
	}
	if f := ep.Failed(); !slices.Equal(f, []int{2}) {
		t.Errorf("Failed() = %v", f)
	}
}

// releasedProvider stands for a provider its endpoint's Close released:
// any use of it is a bug.
type releasedProvider struct{ selfProvider }

func (*releasedProvider) send(int, *wire.Header, []byte) bool {
	panic("send through a released provider")
}
func (*releasedProvider) poll(*engine, int) int { panic("poll of a released provider") }

// TestNoticeAfterClose: a launcher notice that arrives after Close is
// still recorded, and touches no provider (the notice goroutine outlives
// Close; spreading the failure once sent through a released shm ring).
func TestNoticeAfterClose(t *testing.T) {
	e := newEngine(0, 4)
	ep := &Endpoint{e: e, rank: 0, size: 4}
	for w := 1; w < 4; w++ {
		e.route[w] = &releasedProvider{}
	}
	e.provs = append(e.provs, e.route[1])
	e.closed = true
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	rd, wr := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	fmt.Fprintf(wr, "failed rank=2 status=137 time=%d\n", time.Now().UnixNano())
	wr.Close()
	watchLauncher(e, rd)
	rd.Close()
	if f := ep.Failed(); !slices.Equal(f, []int{2}) {
		t.Errorf("Failed() = %v", f)
	}
}

func init() { progs.Add("upgrade", progUpgrade) }

// progUpgrade: rank 0 could not reach rank 2 (as after a handshake that
// timed out): rank 2 is unreachable there — stalled, not failed, not in
// GetFailed. Then rank 1 declares rank 2 failed; its notice makes rank 2
// failed at rank 0 too, and rank 2, fenced, ends itself.
func progUpgrade(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	switch w.Rank() {
	case 0:
		e := ep.e
		e.mu.Lock()
		e.markFailedNow(2, fmt.Errorf("%w: world rank 2: connecting: i/o timeout (the test says)", ErrNoRoute))
		e.mu.Unlock()
		if s, g := ep.State(2), w.GetFailed(); s != Stalled || g.Size() != 0 {
			failf("unreachable rank 2: %v, GetFailed of %d; want stalled, none", s, g.Size())
		}
		must(w.Send(ctx, nil, 1, 1), "tell rank 1")
		deadline := time.Now().Add(time.Minute)
		for ep.State(2) != Failed {
			if time.Now().After(deadline) {
				failf("rank 2 is %v a minute after rank 1 declared it failed", ep.State(2))
			}
			_, _, err := w.Iprobe(0, 12345) // itself: never failed
			must(err, "progress")
		}
		if g := w.GetFailed(); g.Size() != 1 {
			failf("GetFailed has %d members, want rank 2", g.Size())
		} else if r, _ := g.WorldRank(0); r != 2 {
			failf("GetFailed names world rank %d, want 2", r)
		}
	case 1:
		_, err := w.Recv(ctx, nil, 0, 1)
		must(err, "hear from rank 0")
		must(ep.MarkFailed(2, errors.New("the test says")), "declare rank 2 failed")
	case 2:
		time.Sleep(time.Minute) // until fenced out
		failf("alive a minute after being declared failed")
	}
	return nil
}

// TestUnreachableThenFailed: a peer this process could not reach becomes
// failed here once another process declares it failed.
func TestUnreachableThenFailed(t *testing.T) {
	out, errs, st := runJob(t, 3, "upgrade", true, "RIVET_FT_SOURCES=none")
	if st != ExitDeclaredFailed {
		t.Fatalf("status %d, want %d (rank 2 fenced out)\n%s\n%s", st, ExitDeclaredFailed, out, errs)
	}
	for r := 0; r < 2; r++ {
		if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
			t.Fatalf("rank %d did not finish:\n%s\n%s", r, out, errs)
		}
	}
}

// progByeBye: world rank 2 closes and exits at once, before any rank
// talked to it. The others see it stopped, not failed — over verbs too,
// where no connection carried its goodbye (see goodbyes).
func progByeBye(ctx context.Context, ep *Endpoint) error {
	if ep.rank == 2 {
		return nil
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { ep.Progress(pctx); close(done) }()
	defer func() { cancel(); <-done }()
	for t0 := time.Now(); ep.State(2) == Alive; time.Sleep(time.Millisecond) {
		if time.Since(t0) > 30*time.Second {
			failf("world rank 2 still alive 30 s after it closed")
		}
	}
	if s := ep.State(2); s != Stopped {
		failf("world rank 2 is %v, want stopped", s)
	}
	if f := ep.Failed(); len(f) != 0 {
		failf("known failed %v after a clean exit", f)
	}
	return nil
}

// TestCleanExit: a process that closes and exits is stopped at every
// peer of its node, whichever provider reaches it.
func TestCleanExit(t *testing.T) {
	for _, way := range []string{"shm", "verbs"} {
		t.Run(way, func(t *testing.T) {
			runOK(t, 3, "byebye", append(providerEnv(t, way), "RIVET_FT_SOURCES=pidfd")...)
		})
	}
}

func init() { progs.Add("byeverdict", progByeVerdict) }

// byeDirEnv names the directory where progByeVerdict's ranks leave marks.
const byeDirEnv = "FABRIC_TEST_BYE_DIR"

// progByeVerdict: world rank 1 closes its endpoint, and lives on; rank 0
// waits for that without calling the fabric — so it has read nothing of
// rank 1's goodbye — and then gives a detector's verdict on it, as a
// detector whose observed heartbeat stopped in Close does. Rank 1 is
// stopped, not failed: a clean exit is never a failure, whatever the
// order in which the goodbye and the verdict are seen. (CI once failed on
// this: ft's TestThrottled/verbs, rank 1 convicted after it printed its
// result.)
func progByeVerdict(ctx context.Context, ep *Endpoint) error {
	dir := os.Getenv(byeDirEnv)
	closed, judged := filepath.Join(dir, "closed"), filepath.Join(dir, "judged")
	waitFor := func(name string) {
		for t0 := time.Now(); ; time.Sleep(time.Millisecond) {
			if _, err := os.Stat(name); err == nil {
				return
			}
			if time.Since(t0) > time.Minute {
				failf("no %s after a minute", filepath.Base(name))
			}
		}
	}
	switch ep.rank {
	case 1:
		must(ep.Close(), "close")
		must(os.WriteFile(closed, nil, 0o644), "say closed")
		waitFor(judged)
	case 0:
		waitFor(closed)
		must(ep.MarkFailed(1, errors.New("its heartbeat stopped (the test's verdict)")), "verdict")
		if s := ep.State(1); s != Stopped {
			failf("world rank 1, judged after its goodbye: %v, want stopped", s)
		}
		if f := ep.Failed(); len(f) != 0 {
			failf("known failed %v after a clean exit", f)
		}
		must(os.WriteFile(judged, nil, 0o644), "say judged")
	}
	return nil
}

// TestVerdictAfterGoodbye: see progByeVerdict; over shared memory the
// segment's closed word says goodbye, over verbs on one node the goodbye
// datagram.
func TestVerdictAfterGoodbye(t *testing.T) {
	for _, way := range []string{"shm", "verbs"} {
		t.Run(way, func(t *testing.T) {
			runOK(t, 3, "byeverdict", append(providerEnv(t, way), byeDirEnv+"="+t.TempDir())...)
		})
	}
}
