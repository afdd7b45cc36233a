//go:build linux

package verbs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

func TestBadRKey(t *testing.T) {
	devs := testutil.RXEDevices(t)
	a, b := connectPair(t, devs[0], devs[0], sideConfig{})
	bad := b.mr.Remote()
	bad.RKey ^= 0x5a5a00
	if err := a.qp.PostSend(
		SendWR{ID: 1, Op: OpRDMAWrite, Flags: Signaled, Local: []SGE{{MR: a.mr, Length: 64}}, Remote: bad},
		SendWR{ID: 2, Op: OpRDMAWrite, Flags: Signaled, Local: []SGE{{MR: a.mr, Length: 64}}, Remote: b.mr.Remote()},
	); err != nil {
		t.Fatal(err)
	}
	wcs := waitWC(t, a.scq, 2, 10*time.Second)
	err := wcs[0].Err()
	var ce *CompletionError
	if !errors.Is(err, StatusRemAccessErr) || !errors.As(err, &ce) || ce.WRID != 1 || ce.QPN != a.qp.QPN() {
		t.Errorf("bad rkey: %v, want a remote access error for WR 1 on QP %#x", err, a.qp.QPN())
	}
	if !strings.Contains(err.Error(), "remote access error") {
		t.Errorf("message %q", err)
	}
	// The QP is now in ERR: what follows is flushed.
	if !errors.Is(wcs[1].Err(), StatusWRFlushErr) {
		t.Errorf("second request: %v, want flushed", wcs[1].Err())
	}
	if attr, err := a.qp.Query(); err != nil || attr.State != QPError {
		t.Errorf("QP state %v, %v; want ERR", attr.State, err)
	}
}

// refused checks that a post failed with an error that says want and
// wraps ErrInvalid or ErrClosed, and that its queue holds as many requests
// as before it (before, after).
func refused(t *testing.T, err error, want string, before, after uint32) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
	if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrClosed) {
		t.Errorf("%v does not wrap ErrInvalid", err)
	}
	if after != before {
		t.Error("part of a rejected batch was posted")
	}
}

// TestInvalidArguments: each mistake is refused with a clear error and
// nothing reaches the ring.
func TestInvalidArguments(t *testing.T) {
	devs := testutil.RXEDevices(t)
	a, b := connectPair(t, devs[0], devs[0], sideConfig{QPConfig: QPConfig{MaxSendWR: 4, MaxInline: 64}})
	otherPD, err := a.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer otherPD.Close()
	foreign, err := otherPD.Alloc(4096, AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	readOnly, err := a.pd.Alloc(4096, AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer readOnly.Close()
	closedMR, _ := a.pd.Alloc(4096, AccessAll)
	closedMR.Close()
	big, err := a.pd.Alloc(9<<20, AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()

	local := []SGE{{MR: a.mr, Length: 8}}
	for _, tc := range []struct {
		name string
		wr   SendWR
		want string
	}{
		{"unaligned atomic", SendWR{Op: OpFetchAdd, Local: local, Remote: b.mr.Remote().At(4)}, "not 8-byte aligned"},
		{"short atomic buffer", SendWR{Op: OpCompareSwap, Local: []SGE{{MR: a.mr, Length: 4}}, Remote: b.mr.Remote()}, "one 8-byte local SGE"},
		{"atomic into read-only", SendWR{Op: OpFetchAdd, Local: []SGE{{MR: readOnly, Length: 8}}, Remote: b.mr.Remote()}, "local write access"},
		{"out of range", SendWR{Op: OpRDMAWrite, Local: []SGE{{MR: a.mr, Offset: uint64(a.mr.Len()) - 4, Length: 8}}, Remote: b.mr.Remote()}, "outside its"},
		{"offset past end", SendWR{Op: OpSend, Local: []SGE{{MR: a.mr, Offset: 1 << 40, Length: 1}}}, "outside its"},
		{"nil MR", SendWR{Op: OpSend, Local: []SGE{{Length: 1}}}, "without a memory region"},
		{"closed MR", SendWR{Op: OpSend, Local: []SGE{{MR: closedMR, Length: 1}}}, "file already closed"},
		{"other PD", SendWR{Op: OpSend, Local: []SGE{{MR: foreign, Length: 1}}}, "another protection domain"},
		{"too many SGEs", SendWR{Op: OpSend, Local: make([]SGE, 40)}, "SGEs in a send"},
		{"inline too big", SendWR{Op: OpSend, Flags: Inline, Local: []SGE{{MR: a.mr, Length: 600}}}, "inline bytes"},
		{"inline read", SendWR{Op: OpRDMARead, Flags: Inline, Local: local, Remote: b.mr.Remote()}, "cannot be inline"},
		{"remote too small", SendWR{Op: OpRDMAWrite, Local: []SGE{{MR: a.mr, Length: 64}}, Remote: b.mr.Remote().At(uint64(b.mr.Len()) - 8)}, "do not fit"},
		{"message too big", SendWR{Op: OpRDMAWrite, Local: []SGE{{MR: big, Length: 9 << 20}}, Remote: RemoteBuf{Addr: b.mr.Addr(), RKey: b.mr.RKey()}}, "the port's maximum is 8388608"},
		{"bad opcode", SendWR{Op: 42, Local: local}, "send opcode 42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.qp.sq.Outstanding()
			err := a.qp.PostSend(SendWR{Op: OpSend, Local: local}, tc.wr) // a valid one first: all or nothing
			refused(t, err, tc.want, before, a.qp.sq.Outstanding())
		})
	}

	// A batch larger than the free slots is refused whole.
	batch := make([]SendWR, 64)
	for i := range batch {
		batch[i] = SendWR{Op: OpRDMAWrite, Local: local, Remote: b.mr.Remote()}
	}
	if err := a.qp.PostSend(batch...); !errors.Is(err, ErrQueueFull) {
		t.Errorf("oversized batch: %v, want ErrQueueFull", err)
	}

	// Receives likewise, each after a valid one into the same region: a
	// batch checks each region once, and each SGE's bounds every time.
	for _, tc := range []struct {
		name string
		wr   RecvWR
		want string
	}{
		{"read-only", RecvWR{Local: []SGE{{MR: readOnly, Length: 8}}}, "local write access"},
		{"out of range", RecvWR{Local: []SGE{{MR: a.mr, Offset: uint64(a.mr.Len()) - 4, Length: 8}}}, "outside its"},
		{"nil MR", RecvWR{Local: []SGE{{Length: 1}}}, "without a memory region"},
		{"closed MR", RecvWR{Local: []SGE{{MR: closedMR, Length: 1}}}, "file already closed"},
		{"other PD", RecvWR{Local: []SGE{{MR: foreign, Length: 1}}}, "another protection domain"},
		{"too many SGEs", RecvWR{Local: make([]SGE, 40)}, "SGEs in a receive"},
	} {
		t.Run("receive "+tc.name, func(t *testing.T) {
			before := a.qp.rq.Outstanding()
			err := a.qp.PostRecv(RecvWR{Local: local}, tc.wr)
			refused(t, err, tc.want, before, a.qp.rq.Outstanding())
		})
	}

	// Connecting and configuring wrongly.
	if err := a.qp.Connect(b.endpoint(), ConnectConfig{GIDIndex: -1}); !errors.Is(err, ErrState) {
		t.Errorf("second Connect: %v, want ErrState", err)
	}
	fresh, err := a.pd.NewQP(QPConfig{SendCQ: a.scq, RecvCQ: a.rcq})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := fresh.PostSend(SendWR{Op: OpSend, Local: local}); !errors.Is(err, ErrState) {
		t.Errorf("send before Connect: %v, want ErrState", err)
	}
	for _, cc := range []ConnectConfig{{GIDIndex: -1, RetryCount: 7}, {GIDIndex: -1, Timeout: 32}, {GIDIndex: -1, RNRRetry: 8}, {GIDIndex: 5000}} {
		if err := fresh.Connect(b.endpoint(), cc); !errors.Is(err, ErrInvalid) {
			t.Errorf("Connect(%+v): %v, want ErrInvalid", cc, err)
		}
	}
	if err := fresh.Connect(Endpoint{}, ConnectConfig{GIDIndex: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Connect to nobody: %v", err)
	}
	for _, qc := range []QPConfig{{SendCQ: a.scq}, {SendCQ: a.scq, RecvCQ: a.rcq, MaxSendWR: -1}, {SendCQ: a.scq, RecvCQ: a.rcq, MaxInline: 4096}, {SendCQ: a.scq, RecvCQ: a.rcq, Type: UD}} {
		if qp, err := a.pd.NewQP(qc); err == nil {
			qp.Close()
			t.Errorf("NewQP(%+v) succeeded", qc)
		}
	}
	if _, err := a.ctx.NewCQ(CQConfig{Size: 0}); !errors.Is(err, ErrInvalid) {
		t.Errorf("CQ of size 0: %v", err)
	}
	if _, err := a.pd.Alloc(0, AccessAll); !errors.Is(err, ErrInvalid) {
		t.Errorf("Alloc(0): %v", err)
	}
	if _, err := a.pd.Alloc(4096, AccessRemoteWrite); !errors.Is(err, ErrInvalid) {
		t.Errorf("remote write without local write: %v", err)
	}
}

// TestLifetime: children close before parents, Close is idempotent, use
// after Close is an error, and nothing leaks.
func TestLifetime(t *testing.T) {
	devs := testutil.RXEDevices(t)
	testutil.CheckFDs(t)
	ctx, err := Open(devs[0])
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := ctx.AllocPD()
	ch, _ := ctx.NewCompChannel()
	cq, err := ctx.NewCQ(CQConfig{Size: 16, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := AllocMemory(8192)
	mr, err := pd.Register(mem, AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.NewQP(QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"context with children": ctx.Close(), "PD with QP and MR": pd.Close(), "CQ with QP": cq.Close(),
		"channel with CQ": ch.Close(), "memory with MR": mem.Close(),
	} {
		if !errors.Is(err, ErrBusy) {
			t.Errorf("closing %s: %v, want ErrBusy", name, err)
		}
	}
	for _, c := range []interface{ Close() error }{qp, qp, mr, mr, mem, cq, ch, pd, pd, ctx, ctx} {
		if err := c.Close(); err != nil {
			t.Errorf("close %T: %v", c, err)
		}
	}
	if err := qp.PostSend(SendWR{Op: OpSend}); !errors.Is(err, ErrClosed) {
		t.Errorf("post on closed QP: %v", err)
	}
	if err := qp.PostRecv(RecvWR{}); !errors.Is(err, ErrClosed) {
		t.Errorf("receive on closed QP: %v", err)
	}
	if _, err := cq.Poll(make([]WorkCompletion, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("poll on closed CQ: %v", err)
	}
	if _, err := qp.Query(); !errors.Is(err, ErrClosed) {
		t.Errorf("query closed QP: %v", err)
	}
	if _, err := ctx.AllocPD(); !errors.Is(err, ErrClosed) {
		t.Errorf("PD on closed context: %v", err)
	}
	if _, err := ctx.QueryPort(1); err == nil {
		t.Error("query on closed context succeeded")
	}
	if _, err := pd.Alloc(4096, AccessAll); !errors.Is(err, ErrClosed) {
		t.Errorf("alloc on closed PD: %v", err)
	}
	if _, err := Open("nosuchdev0"); err == nil {
		t.Error("opened a missing device")
	}
}

// TestCompChannelWait: a CQ's Wait sleeps until a completion arrives and
// honours its context.
func TestCompChannelWait(t *testing.T) {
	devs := testutil.RXEDevices(t)
	a, b := connectPair(t, devs[0], devs[0], sideConfig{})
	ch, err := b.ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	// Replace b's receive side: a QP on a CQ with a channel.
	cq, err := b.ctx.NewCQ(CQConfig{Size: 16, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	qp, err := b.pd.NewQP(QPConfig{SendCQ: b.scq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	a2, err := a.pd.NewQP(QPConfig{SendCQ: a.scq, RecvCQ: a.rcq})
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	if err := qp.Connect(a2.Endpoint(a.gid), ConnectConfig{GIDIndex: -1}); err != nil {
		t.Fatal(err)
	}
	if err := a2.Connect(qp.Endpoint(b.gid), ConnectConfig{GIDIndex: -1}); err != nil {
		t.Fatal(err)
	}

	wcs := make([]WorkCompletion, 4)
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	_, err = cq.Wait(short, wcs)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Wait on an idle CQ: %v after %v", err, time.Since(start))
	}

	if err := qp.PostRecv(RecvWR{ID: 9, Local: []SGE{{MR: b.mr, Length: 64}}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		a2.PostSend(SendWR{Op: OpSend, Flags: Inline, Local: []SGE{{MR: a.mr, Length: 16}}})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := cq.Wait(ctx, wcs)
	if err != nil || n != 1 || wcs[0].ID != 9 || wcs[0].ByteLen != 16 {
		t.Fatalf("Wait = %d, %v, %+v", n, err, wcs[0])
	}
}

// TestCompChannelNext: Next takes an armed CQ's event, or returns nil
// when none comes in time, allocating nothing; Pending sees a completion
// that landed before the arm, which raises no event.
func TestCompChannelNext(t *testing.T) {
	devs := testutil.RXEDevices(t)
	a, b := connectPair(t, devs[0], devs[0], sideConfig{})
	ch, err := a.ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	cq, err := a.ctx.NewCQ(CQConfig{Size: 16, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	qp, err := a.pd.NewQP(QPConfig{SendCQ: cq, RecvCQ: a.rcq})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	b2, err := b.pd.NewQP(QPConfig{SendCQ: b.scq, RecvCQ: b.rcq})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := qp.Connect(b2.Endpoint(b.gid), ConnectConfig{GIDIndex: -1}); err != nil {
		t.Fatal(err)
	}
	if err := b2.Connect(qp.Endpoint(a.gid), ConnectConfig{GIDIndex: -1}); err != nil {
		t.Fatal(err)
	}
	write := func() {
		t.Helper()
		wr := SendWR{Op: OpRDMAWrite, Flags: Signaled | Inline, Local: []SGE{{MR: a.mr, Length: 8}}, Remote: b.mr.Remote()}
		if err := qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	wcs := make([]WorkCompletion, 4)
	drain := func() {
		t.Helper()
		for got := 0; got < 1; {
			n, err := cq.Poll(wcs)
			if err != nil || n > 0 && wcs[0].Status != StatusSuccess {
				t.Fatalf("poll: %d, %v, %+v", n, err, wcs[0])
			}
			got += n
		}
	}

	if got, err := ch.Next(0); got != nil || err != nil {
		t.Fatalf("Next(0) with no event: %v, %v", got, err)
	}
	if got, err := ch.Next(20 * time.Millisecond); got != nil || err != nil {
		t.Fatalf("Next(20ms) with no event: %v, %v", got, err)
	}
	if allocs := testing.AllocsPerRun(100, func() { ch.Next(0) }); allocs != 0 {
		t.Errorf("Next(0) allocates %.1f times", allocs)
	}
	if allocs := testing.AllocsPerRun(5, func() { ch.Next(time.Millisecond) }); allocs != 0 {
		t.Errorf("Next(1ms) allocates %.1f times", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() { cq.Arm(false) }); allocs != 0 {
		t.Errorf("Arm allocates %.1f times", allocs)
	}

	// Armed, then a completion: its event wakes Next.
	if err := cq.Arm(false); err != nil {
		t.Fatal(err)
	}
	write()
	if got, err := ch.Next(10 * time.Second); got != cq || err != nil {
		t.Fatalf("Next after a completion on the armed CQ: %v, %v", got, err)
	}
	drain()
	// An event already there: Next(0) takes it.
	if err := cq.Arm(false); err != nil {
		t.Fatal(err)
	}
	write()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := ch.Next(0)
		if err != nil || got != nil && got != cq {
			t.Fatalf("Next(0) after a completion on the armed CQ: %v, %v", got, err)
		}
		if got == cq {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Next(0) never took the event of a completion on the armed CQ")
		}
		time.Sleep(time.Millisecond)
	}
	drain()

	// A completion before the arm raises no event: Pending sees it.
	write()
	for !cq.Pending() {
		time.Sleep(time.Millisecond)
	}
	if err := cq.Arm(false); err != nil {
		t.Fatal(err)
	}
	if got, err := ch.Next(0); got != nil || err != nil {
		t.Fatalf("Next(0) for a completion before the arm: %v, %v", got, err)
	}
	drain()
	if cq.Pending() {
		t.Error("Pending after the CQ was drained")
	}
	// The CQ is still armed: the next completion wakes Next.
	write()
	if got, err := ch.Next(10 * time.Second); got != cq || err != nil {
		t.Fatalf("Next after the arm that found a completion: %v, %v", got, err)
	}
	drain()
}

// TestPostPollAllocs: the fast path allocates nothing.
func TestPostPollAllocs(t *testing.T) {
	devs := testutil.RXEDevices(t)
	a, b := connectPair(t, devs[0], devs[0], sideConfig{})
	wr := SendWR{Op: OpRDMAWrite, Flags: Signaled | Inline, Local: []SGE{{MR: a.mr, Length: 8}}, Remote: b.mr.Remote()}
	wcs := make([]WorkCompletion, 1)
	allocs := testing.AllocsPerRun(2000, func() {
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		for {
			n, _ := a.scq.Poll(wcs)
			if n == 1 {
				break
			}
		}
	})
	if allocs != 0 {
		t.Errorf("post+poll allocates %.1f times per operation", allocs)
	}
	rwr := RecvWR{Local: []SGE{{MR: b.mr, Length: 8}}}
	allocs = testing.AllocsPerRun(100, func() {
		if err := b.qp.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("post receive allocates %.1f times", allocs)
	}
}

// BenchmarkWritePostPoll is an 8-byte inline RDMA write, posted and polled
// to completion: the round trip through the rings and the doorbell.
func BenchmarkWritePostPoll(b *testing.B) {
	devs := testutil.RXEDevices(b)
	x, y := connectPair(b, devs[0], devs[0], sideConfig{})
	wr := SendWR{Op: OpRDMAWrite, Flags: Signaled | Inline, Local: []SGE{{MR: x.mr, Length: 8}}, Remote: y.mr.Remote()}
	wcs := make([]WorkCompletion, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := x.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		for {
			if n, _ := x.scq.Poll(wcs); n == 1 {
				break
			}
		}
	}
}
