//go:build linux

package fabric

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/rdma"
	"github.com/rivet-hpc/rivet/internal/launch"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestVerbsPointToPoint runs the point-to-point programs unchanged with
// every peer reached over verbs (RDMA loopback on one device, and spread
// over both devices of the rxe2 topology, so that frames cross between
// rxe0 and rxe1), on 2 and 4 ranks.
func TestVerbsPointToPoint(t *testing.T) {
	devs := testutil.RXEDevices(t)
	placements := map[string]string{"one-device": devs[0]}
	if len(devs) > 1 {
		placements["two-devices"] = strings.Join(devs, ",")
	}
	for name, dev := range placements {
		for _, n := range []int{2, 4} {
			for _, prog := range []string{"sizes", "order", "fair", "many", "cancel", "probe", "badinput", "comms"} {
				switch prog {
				case "order", "fair", "many", "comms":
					if n != 4 {
						continue // these are written for 4 ranks
					}
				case "cancel", "probe", "badinput":
					if n != 2 {
						continue // and these for 2
					}
				}
				t.Run(fmt.Sprintf("%s/%d/%s", name, n, prog), func(t *testing.T) {
					testutil.LogRXECountersOnFailure(t)
					out := runOK(t, n, prog, "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+dev)
					_ = out
				})
			}
		}
	}
}

func init() {
	progs.Add("mixed", progMixed)
	progs.BeforeInit("mixed", twoNodes)
	progs.Add("vkill", progVerbsKill)
	progs.BeforeInit("vkill", func() {
		twoNodes()
		// Only the fabric's own means may notice the failure: no
		// launcher notices.
		os.Unsetenv("RIVET_FT_FD")
	})
	progs.Add("flood", progFlood)
	progs.Add("direct", progDirect)
}

// twoNodes puts ranks 0 and 1 on node "a" and the others on node "b".
func twoNodes() {
	r, _ := strconv.Atoi(os.Getenv("PMI_RANK"))
	node := "a"
	if r >= 2 {
		node = "b"
	}
	os.Setenv("RIVET_NODE", node)
}

// progMixed: a job on two nodes — shared memory within each, verbs
// between them — runs the point-to-point programs.
func progMixed(ctx context.Context, ep *Endpoint) error {
	me := ep.World().Rank()
	for r := 0; r < 4; r++ {
		want := "verbs"
		switch {
		case r == me:
			want = "self"
		case r/2 == me/2:
			want = "shm"
		}
		if got := ep.Provider(r); got != want {
			failf("rank %d reaches rank %d over %q, want %q", me, r, got, want)
		}
	}
	var log strings.Builder
	ep.logRoutes(&log)
	if want := "self 0; shm 1; verbs(" + ep.Device() + ") 2-3"; me == 0 && !strings.HasSuffix(strings.TrimSpace(log.String()), want) {
		failf("RIVET_VERBOSE's line %q does not end in %q", log.String(), want)
	}
	for _, p := range []func(context.Context, *Endpoint) error{progSizes, progOrder, progMany} {
		if err := p(ctx, ep); err != nil {
			return err
		}
	}
	return nil
}

func TestVerbsMixedJob(t *testing.T) {
	testutil.RXEDevices(t)
	testutil.LogRXECountersOnFailure(t)
	out := runOK(t, 4, "mixed")
	t.Log(strings.Count(out, "ok"), "ranks ok")
}

// progVerbsKill: rank 2 (node b) is SIGKILLed while rank 0 (node a)
// streams rendezvous messages to it and ranks 1 and 3 wait for a message
// from it. Nothing but the verbs provider tells ranks 0 and 1 (no pidfd:
// another node; no launcher notice); rank 3, on rank 2's node, sees its
// pidfd.
func progVerbsKill(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	msg := make([]byte, 256<<10)
	switch w.Rank() {
	case 2:
		for i := 0; ; i++ {
			if _, err := w.Recv(ctx, msg, 0, 1); err != nil {
				return err
			}
			if i == 3 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	case 0:
		var last time.Time
		for {
			if err := w.Send(ctx, msg, 2, 1); err != nil {
				took := time.Since(last)
				var pe *PeerError
				if !errors.Is(err, ErrProcFailed) || !errors.As(err, &pe) || pe.WorldRank != 2 {
					failf("send to the killed rank: %v", err)
				}
				bound := ep.verbs.FailureBound() + rdma.ProbeEvery
				fmt.Printf("send failed %v after the last one completed (bound %v): %v\n", took.Round(time.Millisecond), bound, err)
				// Measured from the last completed send, so it includes the
				// killed process's teardown (its queue pairs answer until
				// they are destroyed): a second's slack under TCG.
				if took > bound+time.Second {
					failf("the failure took %v, beyond the bound %v", took, bound)
				}
				break
			}
			last = time.Now()
		}
	case 1, 3:
		start := time.Now()
		_, err := w.Recv(ctx, msg, 2, 7)
		if !errors.Is(err, ErrProcFailed) {
			failf("receive from the killed rank: %v", err)
		}
		fmt.Printf("receive failed after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
	}
	// The survivors still talk, over shm (0-1) and verbs (0-3, 1-3).
	got := make([]byte, 1)
	for _, peer := range []int{0, 1, 3} {
		if peer == w.Rank() {
			continue
		}
		if _, err := w.Sendrecv(ctx, []byte{byte(w.Rank())}, peer, 9, got, peer, 9); err != nil || int(got[0]) != peer {
			failf("survivors %d and %d: %v", w.Rank(), peer, err)
		}
	}
	return nil
}

func TestVerbsPeerKilled(t *testing.T) {
	testutil.RXEDevices(t)
	out, errs, st := runJob(t, 4, "vkill", true)
	if st != 128+9 {
		t.Fatalf("status %d, want 137 (rank 2 killed)\n%s\n%s", st, out, errs)
	}
	for _, r := range []int{0, 1, 3} {
		if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
			t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "failed") {
			t.Log(l)
		}
	}
}

// progDirect: a blocking receive from one verbs peer reads that peer's
// frames itself (recvDirect), and gives way to the general path whenever
// that could change what matches what: a frame for another receive, a
// message too long for the buffer or sent by rendezvous, a receive posted
// by another goroutine, a wait that ends with its context.
func progDirect(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me := w.Rank()
	peer := 1 - me
	e := w.e
	if ep.Provider(peer) != "verbs" {
		failf("rank %d reaches rank %d over %s", me, peer, ep.Provider(peer))
	}
	// One receive through the general path puts an operation in the
	// pool, and an answer makes sure nothing else is on its way: the
	// general wait would take it as unexpected.
	if me == 0 {
		must(w.Send(ctx, []byte("seed"), peer, 9), "seed send")
		_, err := w.Recv(ctx, make([]byte, 4), peer, 9)
		must(err, "seed answer")
	} else {
		req, err := w.Irecv(make([]byte, 4), peer, 9)
		must(err, "seed irecv")
		_, err = req.Wait(ctx)
		must(err, "seed wait")
		must(w.Send(ctx, []byte("seed"), peer, 9), "seed answer")
	}
	pool := func() (*op, uint64) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.freeR == nil {
			return nil, 0
		}
		return e.freeR, e.freeR.gen
	}
	head, gen := pool()

	// A ping-pong: every receive takes the direct path, so no operation
	// leaves the pool (one that did would come back with its generation
	// bumped).
	var b [8]byte
	for i := 0; i < 300; i++ {
		if (i+me)%2 == 0 {
			binary.LittleEndian.PutUint64(b[:], uint64(i))
			must(w.Send(ctx, b[:], peer, 1), "ping-pong send")
			continue
		}
		tag := 1
		if i%3 == 0 {
			tag = AnyTag
		}
		st, err := w.Recv(ctx, b[:], peer, tag)
		must(err, "ping-pong recv")
		if v := binary.LittleEndian.Uint64(b[:]); v != uint64(i) || st.Source != peer || st.Tag != 1 || st.Count != 8 {
			failf("ping-pong message %d: got %d, status %+v", i, v, st)
		}
	}
	if h, g := pool(); h != head || g != gen {
		failf("a ping-pong receive took the general path (pool head %p gen %d, was %p gen %d)", h, g, head, gen)
	}

	short, long := pattern(100, 5), pattern(rdma.Eager+1, 6)
	if me == 1 {
		must(w.Send(ctx, []byte("two"), peer, 2), "send 2")
		must(w.Send(ctx, []byte("one"), peer, 1), "send 1")
		must(w.Send(ctx, short, peer, 3), "send short")
		must(w.Send(ctx, long, peer, 4), "send long")
		// The other side's receive for tag 5 timed out before this
		// message was sent; it must still be received.
		_, err := w.Recv(ctx, b[:1], peer, 6)
		must(err, "recv go")
		must(w.Send(ctx, []byte("late"), peer, 5), "send late")
		// Then two messages for two goroutines' receives, in the
		// opposite order to their posting.
		_, err = w.Recv(ctx, b[:1], peer, 6)
		must(err, "recv go")
		must(w.Send(ctx, []byte("for B"), peer, 8), "send 8")
		must(w.Send(ctx, []byte("for A"), peer, 7), "send 7")
		return nil
	}
	// A frame for another tag first: it is queued as unexpected, and this
	// receive goes on to find its own after it.
	buf := make([]byte, 16)
	st, err := w.Recv(ctx, buf, peer, 1)
	if err != nil || string(buf[:st.Count]) != "one" {
		failf("tag 1 behind tag 2: %q, %v", buf[:st.Count], err)
	}
	st, err = w.Recv(ctx, buf, peer, 2)
	if err != nil || string(buf[:st.Count]) != "two" {
		failf("tag 2 from the unexpected queue: %q, %v", buf[:st.Count], err)
	}
	// Too long for the buffer: the prefix and ErrTruncated, as ever.
	st, err = w.Recv(ctx, buf[:10], peer, 3)
	if !errors.Is(err, ErrTruncated) || st.Count != 10 || !bytes.Equal(buf[:10], short[:10]) {
		failf("truncated direct receive: %v, %+v", err, st)
	}
	// A rendezvous message.
	got := make([]byte, len(long))
	st, err = w.Recv(ctx, got, peer, 4)
	if err != nil || st.Count != len(long) || !bytes.Equal(got, long) {
		failf("rendezvous message: %v, %+v", err, st)
	}
	// A wait that times out consumes nothing.
	quick, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	st, err = w.Recv(quick, buf, peer, 5)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !st.Cancelled {
		failf("a timed-out receive: %v, %+v", err, st)
	}
	must(w.Send(ctx, []byte{1}, peer, 6), "send go")
	st, err = w.Recv(ctx, buf, peer, 5)
	if err != nil || string(buf[:st.Count]) != "late" {
		failf("the message after a timed-out receive: %q, %v", buf[:st.Count], err)
	}
	// Goroutine A waits in a direct receive when B posts its own; each
	// gets its message.
	aDone := make(chan error, 1)
	go func() {
		bufA := make([]byte, 16)
		st, err := w.Recv(ctx, bufA, peer, 7)
		if err == nil && string(bufA[:st.Count]) != "for A" {
			err = fmt.Errorf("A got %q", bufA[:st.Count])
		}
		aDone <- err
	}()
	for {
		e.mu.Lock()
		waiting := e.direct == peer
		e.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	bufB := make([]byte, 16)
	req, err := w.Irecv(bufB, peer, 8)
	must(err, "irecv B")
	must(w.Send(ctx, []byte{1}, peer, 6), "send go")
	st, err = req.Wait(ctx)
	if err != nil || string(bufB[:st.Count]) != "for B" {
		failf("B: %q, %v", bufB[:st.Count], err)
	}
	must(<-aDone, "A")
	return nil
}

func TestVerbsDirectReceive(t *testing.T) {
	devs := testutil.RXEDevices(t)
	testutil.LogRXECountersOnFailure(t)
	runOK(t, 2, "direct", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+devs[0])
}

// progFlood: ranks 1-3 each send 20000 small messages to rank 0, which
// sleeps before receiving any: the senders must wait for credits rather
// than overrun rank 0's receive buffers.
func progFlood(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	const each = 20000
	if w.Rank() != 0 {
		sendSeq(ctx, ep, each)
		return nil
	}
	time.Sleep(time.Second)
	recvSeq(ctx, ep, each)
	return nil
}

// sendSeq sends rank 0 each 8-byte messages numbered from 0, tag 4.
func sendSeq(ctx context.Context, ep *Endpoint, each int) {
	w := ep.World()
	var b [8]byte
	for i := 0; i < each; i++ {
		binary.LittleEndian.PutUint64(b[:], uint64(i))
		mustStream(ep, w.Send(ctx, b[:], 0, 4), "send")
	}
}

// recvSeq receives sendSeq's messages from every other rank, from any
// source, and checks that each sender's come in order.
func recvSeq(ctx context.Context, ep *Endpoint, each int) {
	w := ep.World()
	next := make([]uint64, w.Size())
	var b [8]byte
	for i := 0; i < each*(w.Size()-1); i++ {
		st, err := w.Recv(ctx, b[:], AnySource, 4)
		mustStream(ep, err, "recv")
		if v := binary.LittleEndian.Uint64(b[:]); v != next[st.Source] {
			failf("message %d from rank %d, want %d", v, st.Source, next[st.Source])
		}
		next[st.Source]++
	}
}

// mustStream is must for a stream of messages over verbs: a stream that
// stopped says first how this process's links and receive pool stood —
// whether credits held the frames back, or a queue pair that did not
// send them.
func mustStream(ep *Endpoint, err error, what string) {
	if err != nil && ep.verbs != nil {
		ep.e.mu.Lock()
		for _, w := range ep.verbs.QueuePairs() {
			if l, ok := ep.verbs.Link(w); ok {
				fmt.Fprintf(os.Stderr, "link to world rank %d: %+v\n", w, l)
			}
		}
		fmt.Fprintf(os.Stderr, "pool: %+v\n", ep.verbs.Pool())
		ep.e.mu.Unlock()
	}
	must(err, what)
}

// rxeCounter reads one of a device's port 1 counters.
func rxeCounter(t *testing.T, dev, name string) int64 {
	v, ok := testutil.RDMACounters()[dev+"/1/"+name]
	if !ok {
		t.Fatalf("%s has no port 1 counter %s", dev, name)
	}
	return v
}

// noRNR reads dev's receiver-not-ready counters — NAKs sent and
// received, RNR retries run out — and returns a check that fails t, saying
// what happened, if any of them moved since. (Not transport retries: a
// sender that exits while a peer probes it may legitimately cost one.)
func noRNR(t *testing.T, dev, what string) (check func()) {
	counters := []string{"send_rnr_err", "rcvd_rnr_err", "retry_rnr_exceeded_err"}
	before := map[string]int64{}
	for _, c := range counters {
		before[c] = rxeCounter(t, dev, c)
	}
	return func() {
		for _, c := range counters {
			if d := rxeCounter(t, dev, c) - before[c]; d != 0 {
				t.Errorf("%s went up by %d: %s", c, d, what)
			}
		}
	}
}

func TestVerbsFlood(t *testing.T) {
	devs := testutil.RXEDevices(t)
	testutil.LogRXECountersOnFailure(t)
	check := noRNR(t, devs[0], "the flood overran the receiver")
	start := time.Now()
	runOK(t, 4, "flood", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+devs[0])
	t.Logf("60000 messages from 3 senders in %v", time.Since(start).Round(time.Millisecond))
	check()
}

func init() { progs.Add("portdown", progPortDown) }

// progPortDown: rank 0 takes its device's netdev down and up again; both
// ranks see their peer suspect (Health wraps ErrNoRoute) and then healthy
// again, and still talk. Rank 1 stays out of the fabric meanwhile (its
// probes would fail while the link is down) until rank 0 leaves a flag
// file.
func progPortDown(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	flag := os.Getenv("PORTDOWN_FLAG")
	waitHealth := func(peer int, down bool) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := ep.Health(peer)
			if down == errors.Is(err, ErrNoRoute) {
				fmt.Printf("rank %d: health of %d: %v\n", w.Rank(), peer, err)
				return
			}
			if time.Now().After(deadline) {
				failf("health of rank %d stayed %v", peer, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if w.Rank() == 0 {
		netdev := ep.verbs.Device().Device().Parent
		ip := func(state string) {
			if out, err := exec.Command("ip", "link", "set", netdev, state).CombinedOutput(); err != nil {
				failf("ip link set %s %s: %v\n%s", netdev, state, err, out)
			}
		}
		ip("down")
		waitHealth(1, true)
		ip("up")
		waitHealth(1, false)
		must(os.WriteFile(flag, nil, 0o600), "flag")
	} else {
		for {
			if _, err := os.Stat(flag); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := ep.Health(0); err != nil {
			failf("health of rank 0 after the port came back: %v", err)
		}
	}
	got := make([]byte, 1)
	peer := 1 - w.Rank()
	if _, err := w.Sendrecv(ctx, []byte{byte(w.Rank())}, peer, 9, got, peer, 9); err != nil || int(got[0]) != peer {
		failf("after the port came back: %v", err)
	}
	return nil
}

func TestVerbsPortDown(t *testing.T) {
	devs := testutil.RXEDevices(t)
	out := runOK(t, 2, "portdown", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+devs[0],
		"PORTDOWN_FLAG="+filepath.Join(t.TempDir(), "flag"))
	t.Log(out)
}

func init() { progs.Add("lazy", progLazy) }

// progLazy: connections are made on first use. Ranks 0-1 and 2-3 talk in
// pairs; until then, and after, no process has a queue pair for the other
// pair. Then 1-2 and 3-0 talk, both ends of each starting the connection
// at once.
func progLazy(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me := w.Rank()
	qps := func() []int {
		ep.e.mu.Lock()
		defer ep.e.mu.Unlock()
		return ep.verbs.QueuePairs()
	}
	mate := me ^ 1
	// (The mate may connect to us first.)
	if got := qps(); len(got) > 1 || len(got) == 1 && got[0] != mate {
		failf("queue pairs for %v before any traffic", got)
	}
	got := make([]byte, 1)
	if _, err := w.Sendrecv(ctx, []byte{byte(me)}, mate, 1, got, mate, 1); err != nil || int(got[0]) != mate {
		failf("pair: %v", err)
	}
	// Checked before the fence: past it, a cross partner may connect to
	// us at any moment.
	if got := qps(); len(got) != 1 || got[0] != mate {
		failf("queue pairs for %v after talking to %d alone", got, mate)
	}
	must(ep.boot.Fence(ctx), "fence") // the pairs are done
	partner := (me + 3) % 4
	if me%2 == 1 {
		partner = (me + 1) % 4
	}
	if _, err := w.Sendrecv(ctx, []byte{byte(me)}, partner, 2, got, partner, 2); err != nil || int(got[0]) != partner {
		failf("cross pair: %v", err)
	}
	if got := qps(); !slices.Equal(got, []int{min(mate, partner), max(mate, partner)}) {
		failf("queue pairs for %v after talking to %d and %d", got, mate, partner)
	}
	return nil
}

func TestVerbsLazyConnect(t *testing.T) {
	devs := testutil.RXEDevices(t)
	runOK(t, 4, "lazy", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+strings.Join(devs, ","))
}

func init() {
	progs.Add("alone", func(ctx context.Context, ep *Endpoint) error {
		for w := range ep.World().Size() {
			want := "verbs"
			if w == ep.World().Rank() {
				want = "self"
			}
			if ep.Node(w) != w || ep.Provider(w) != want {
				failf("rank %d on node %d, reached over %q", w, ep.Node(w), ep.Provider(w))
			}
		}
		return nil
	})
	// Each rank on a node of its own.
	progs.BeforeInit("alone", func() { os.Setenv("RIVET_NODE", os.Getenv("PMI_RANK")) })
}

// TestVerbsInitLookups: over verbs too, Init's lookups at the launcher grow
// with the ranks, not their square — a process reads a peer's address when
// it first connects to it: 16 ranks, each on a node of its own, that never
// talk made 6 lookups a rank (reading every peer's address at Init makes
// 30 more each).
func TestVerbsInitLookups(t *testing.T) {
	devs := testutil.RXEDevices(t)
	const n = 16
	var gets atomic.Int64
	out, errs, st := progs.RunWith(t, launch.Options{N: n, Lookups: &gets,
		Env: []string{"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + strings.Join(devs, ",")}}, "alone")
	if st != 0 || strings.Count(out, " ok") != n {
		t.Fatalf("status %d\n%s\n%s", st, out, errs)
	}
	t.Logf("%d ranks over verbs: %d lookups", n, gets.Load())
	if got := gets.Load(); got > 10*n {
		t.Errorf("%d ranks over verbs made %d lookups: more than 10 a rank", n, got)
	}
}

// TestLost: how the engine classes what the verbs provider reports
// lost — a peer that said goodbye closed, one whose process is gone or
// whose queue pair failed failed, one that cannot be reached unreachable
// — always naming the world rank.
func TestLost(t *testing.T) {
	completion := errors.New("over rxe0: transport retry counter exceeded")
	for _, c := range []struct {
		closed bool
		cause  error
		want   error
	}{
		{false, fmt.Errorf("%w: its connection port refused the handshake", rdma.ErrGone), ErrProcFailed},
		{false, fmt.Errorf("%w: connecting to world rank 2: i/o timeout", rdma.ErrNoRoute), ErrNoRoute},
		{false, completion, ErrProcFailed},
		{true, completion, ErrClosed},
	} {
		e := newEngine(0, 3)
		e.Lost(2, c.closed, c.cause)
		got := e.failed[2]
		if !errors.Is(got, c.want) || !strings.Contains(got.Error(), "world rank 2") {
			t.Errorf("Lost(2, %v, %v): %v, want %v", c.closed, c.cause, got, c.want)
		}
		if c.want != ErrProcFailed && errors.Is(got, ErrProcFailed) {
			t.Errorf("Lost(2, %v, %v): %v is not a failure", c.closed, c.cause, got)
		}
	}
}
