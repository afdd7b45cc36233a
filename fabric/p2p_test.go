//go:build linux

package fabric

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/rdma"
	"github.com/rivet-hpc/rivet/fabric/internal/shm"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

func init() {
	progs.Add("sizes", progSizes)
	progs.Add("order", progOrder)
	progs.Add("fair", progFair)
	// Over verbs, a peer's first credits must hold all it sends: 3 × 64
	// of the pool's 256 buffers.
	progs.BeforeInit("fair", func() { testHookVerbsInitial = 64 })
	progs.Add("many", progMany)
	progs.Add("cancel", progCancel)
	progs.Add("probe", progProbe)
	progs.Add("badinput", progBadInput)
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>8)
	}
	return b
}

// progSizes: rank 0 sends every size to every other rank, which echoes
// it back; sizes cross the eager limits (shm's and verbs') and reach
// 16 MiB (to rank 1). Rank 0 sends from and receives into Go memory; from
// 64 KiB on, it repeats with AllocMem memory on both sides, which the
// verbs provider moves without staging.
func progSizes(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	sizes := []int{0, 1, 7, 64, 4095, rdma.Eager - 1, rdma.Eager, rdma.Eager + 1, shm.Eager - 1, shm.Eager, shm.Eager + 1,
		64 << 10, 64 << 10, 1 << 20, 1 << 20, 4<<20 + 3, 16 << 20, 16 << 20}
	var mem [][]byte
	defer func() {
		for _, b := range mem {
			must(ep.FreeMem(b), "FreeMem")
		}
	}()
	for peer := 1; peer < w.Size(); peer++ {
		for i, n := range sizes {
			if n > 1<<20 && peer != 1 {
				continue
			}
			alloc := func(n int) []byte { return make([]byte, n) }
			if i > 0 && sizes[i-1] == n {
				alloc = func(n int) []byte {
					b, err := ep.AllocMem(n)
					must(err, "AllocMem")
					mem = append(mem, b)
					return b
				}
			}
			switch w.Rank() {
			case 0:
				msg := alloc(n)
				copy(msg, pattern(n, peer))
				must(w.Send(ctx, msg, peer, n%1000), "send")
				back := alloc(n)
				st, err := w.Recv(ctx, back, peer, n%1000)
				must(err, "recv echo")
				if st.Count != n || st.Source != peer || st.Tag != n%1000 || !bytes.Equal(back, msg) {
					failf("size %d to %d: echo came back wrong (status %+v)", n, peer, st)
				}
			case peer:
				buf := alloc(n)
				st, err := w.Recv(ctx, buf, 0, AnyTag)
				must(err, "recv")
				if st.Count != n || !bytes.Equal(buf, pattern(n, peer)) {
					failf("size %d: got %d bytes, wrong content", n, st.Count)
				}
				must(w.Send(ctx, buf, 0, st.Tag), "echo")
			}
		}
	}
	return nil
}

func TestSizes(t *testing.T) { runOK(t, 3, "sizes") }

// TestWildcards: the matching rule (wire.Header.Matches) and the API
// spell "any" alike.
func TestWildcards(t *testing.T) {
	if AnySource != wire.Any || AnyTag != wire.Any {
		t.Fatalf("AnySource %d, AnyTag %d, wire.Any %d", AnySource, AnyTag, wire.Any)
	}
	h := wire.Header{Ctx: 3, Src: 1, Tag: 7}
	for _, c := range []struct {
		ctx      uint32
		src, tag int
		want     bool
	}{{3, 1, 7, true}, {3, AnySource, 7, true}, {3, 1, AnyTag, true}, {3, AnySource, AnyTag, true},
		{4, AnySource, AnyTag, false}, {3, 2, AnyTag, false}, {3, AnySource, 8, false}} {
		if got := h.Matches(c.ctx, c.src, c.tag); got != c.want {
			t.Errorf("Matches(%d, %d, %d) = %v", c.ctx, c.src, c.tag, got)
		}
	}
}

// progOrder: MPI's non-overtaking rule per (source, tag, communicator),
// with eager and rendezvous messages mixed, and two tags received in the
// opposite order from the one they were sent in.
func progOrder(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	n, r := w.Size(), w.Rank()
	const count = 400
	to, from := (r+1)%n, (r+n-1)%n
	var reqs []Request
	for i := 0; i < count; i++ {
		size := 8
		if i%50 == 0 {
			size = 100 << 10 // rendezvous in the middle of eager traffic
		}
		msg := make([]byte, size)
		binary.LittleEndian.PutUint64(msg, uint64(i))
		tag := 1 + i%2
		req, err := w.Isend(msg, to, tag)
		must(err, "isend")
		reqs = append(reqs, req)
	}
	buf := make([]byte, 100<<10)
	for _, tag := range []int{2, 1} {
		for i := tag - 1; i < count; i += 2 {
			st, err := w.Recv(ctx, buf, from, tag)
			must(err, "recv")
			if got := binary.LittleEndian.Uint64(buf); got != uint64(i) || st.Tag != tag {
				failf("tag %d: got message %d, want %d", tag, got, i)
			}
		}
	}
	return WaitAll(ctx, reqs, nil)
}

func TestOrder(t *testing.T) { runOK(t, 4, "order") }

// progFair: three senders fill their rings before rank 0 polls at all;
// receives from AnySource then take from all three in turn.
func progFair(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	const each = 60 // fits in a ring (or the verbs credits) without the receiver's help
	// Connections first: a provider may make them on first use (verbs),
	// and the test is about messages already there.
	if w.Rank() != 0 {
		_, err := w.Sendrecv(ctx, nil, 0, 6, nil, 0, 6)
		must(err, "warm-up")
	} else {
		for r := 1; r < w.Size(); r++ {
			_, err := w.Sendrecv(ctx, nil, r, 6, nil, r, 6)
			must(err, "warm-up")
		}
	}
	// Rank 0 polls nothing between these fences (rivetrun's are barriers);
	// without the first, it could still be draining rings inside Init.
	must(ep.boot.Fence(ctx), "fence")
	if w.Rank() != 0 {
		var reqs []Request
		for i := 0; i < each; i++ {
			req, err := w.Isend([]byte{byte(w.Rank())}, 0, 5)
			must(err, "isend")
			reqs = append(reqs, req)
		}
		must(ep.boot.Fence(ctx), "fence")
		return WaitAll(ctx, reqs, nil)
	}
	must(ep.boot.Fence(ctx), "fence") // every ring is full now
	counts := map[int]int{}
	buf := make([]byte, 1)
	for i := 0; i < 3*each; i++ {
		st, err := w.Recv(ctx, buf, AnySource, 5)
		must(err, "recv")
		if int(buf[0]) != st.Source {
			failf("message from %d says %d", st.Source, buf[0])
		}
		counts[st.Source]++
		if i == each-1 {
			for s := 1; s <= 3; s++ {
				if counts[s] < each/4 {
					failf("after %d receives from AnySource: %v — rank %d starved", each, counts, s)
				}
			}
		}
	}
	return nil
}

func TestAnySourceFairness(t *testing.T) { runOK(t, 4, "fair") }

// progMany: thousands of outstanding requests each way, receives posted
// before the sends and matched by tag out of order.
func progMany(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	peer := w.Rank() ^ 1
	const n = 5000
	recvs := make([]Request, n)
	bufs := make([][]byte, n)
	for i := n - 1; i >= 0; i-- {
		bufs[i] = make([]byte, 16)
		req, err := w.Irecv(bufs[i], peer, i)
		must(err, "irecv")
		recvs[i] = req
	}
	must(ep.boot.Fence(ctx), "fence")
	sends := make([]Request, n)
	for i := 0; i < n; i++ {
		msg := []byte(fmt.Sprintf("%d→%d #%d", w.Rank(), peer, i))
		req, err := w.Isend(msg, peer, i)
		must(err, "isend")
		sends[i] = req
	}
	sts := make([]Status, n)
	must(WaitAll(ctx, sends, nil), "wait sends")
	must(WaitAll(ctx, recvs, sts), "wait receives")
	for i := 0; i < n; i++ {
		st := sts[i]
		if !recvs[i].IsNull() {
			failf("WaitAll left request %d set", i)
		}
		if want := fmt.Sprintf("%d→%d #%d", peer, w.Rank(), i); string(bufs[i][:st.Count]) != want {
			failf("tag %d: got %q, want %q", i, bufs[i][:st.Count], want)
		}
	}
	// WaitAny hands back requests as they complete.
	var reqs []Request
	for i := 0; i < 4; i++ {
		req, err := w.Irecv(make([]byte, 1), peer, 100+i)
		must(err, "irecv")
		reqs = append(reqs, req)
	}
	for i := 3; i >= 0; i-- {
		must(w.Send(ctx, []byte{byte(i)}, peer, 100+i), "send")
	}
	for k := 0; k < 4; k++ {
		i, _, err := WaitAny(ctx, reqs)
		must(err, "waitany")
		if i < 0 || !reqs[i].IsNull() {
			failf("WaitAny returned %d and left it set", i)
		}
	}
	if i, _, _ := WaitAny(ctx, reqs); i != -1 {
		failf("WaitAny over nil requests returned %d", i)
	}
	return nil
}

func TestManyOutstanding(t *testing.T) { runOK(t, 4, "many") }

// progCancel: receives that nothing will match end with their context,
// promptly, and leave the engine usable.
func progCancel(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	peer := w.Rank() ^ 1
	req, err := w.Irecv(make([]byte, 8), peer, 999)
	must(err, "irecv")
	if !req.Cancel() {
		failf("an unmatched receive could not be cancelled")
	}
	st, done, err := req.Test()
	if !done || err != nil || !st.Cancelled {
		failf("cancelled receive: done %v, status %+v, err %v", done, st, err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	t0 := time.Now()
	_, err = w.Recv(short, make([]byte, 8), peer, 998)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 2*time.Second {
		failf("Recv with a 50 ms deadline: %v after %v", err, time.Since(t0))
	}
	req, _ = w.Irecv(make([]byte, 8), AnySource, 997)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if st, err := req.Wait(gone); !errors.Is(err, context.Canceled) || !st.Cancelled || !req.IsNull() {
		failf("Wait with a cancelled context: %v, %+v, null %v", err, st, req.IsNull())
	}
	// A copy of a handle another copy completed says so.
	req, _ = w.Irecv(make([]byte, 8), peer, 996)
	cp := req
	req.Cancel()
	if _, err := req.Wait(ctx); err != nil || !req.IsNull() {
		failf("waiting on a cancelled request: %v", err)
	}
	if _, err := cp.Wait(ctx); !errors.Is(err, ErrRequestDone) {
		failf("waiting on a stale copy: %v", err)
	}
	var null Request
	if st, err := null.Wait(ctx); err != nil || st != (Status{}) {
		failf("the null request: %v %+v", err, st)
	}
	// The pair still talks, and nothing cancelled matches later traffic.
	st, err = w.Sendrecv(ctx, []byte("after"), peer, 999, make([]byte, 8), peer, 999)
	must(err, "sendrecv")
	if st.Count != 5 {
		failf("after cancelling: got %d bytes", st.Count)
	}
	return nil
}

func TestCancel(t *testing.T) { runOK(t, 2, "cancel") }

// progProbe: Probe and Iprobe see a message's source, tag and size
// before it is received; truncation is an error that keeps the prefix.
func progProbe(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	if w.Rank() == 1 {
		must(w.Send(ctx, pattern(12345, 1), 0, 3), "send")
		must(w.Send(ctx, pattern(100, 2), 0, 4), "send")
		must(w.Send(ctx, pattern(100000, 3), 0, 5), "send")
		must(SendSlice(ctx, w, []float64{1.5, -2, 3e300}, 0, 6), "send floats")
		return nil
	}
	if _, ok, err := w.Iprobe(1, 77); ok || err != nil {
		failf("Iprobe for a tag never sent: %v %v", ok, err)
	}
	st, err := w.Probe(ctx, AnySource, AnyTag)
	must(err, "probe")
	if st.Source != 1 || st.Tag != 3 || st.Count != 12345 {
		failf("probe: %+v", st)
	}
	buf := make([]byte, st.Count)
	if _, err := w.Recv(ctx, buf, st.Source, st.Tag); err != nil || !bytes.Equal(buf, pattern(12345, 1)) {
		failf("receiving the probed message: %v", err)
	}
	small := make([]byte, 10)
	st, err = w.Recv(ctx, small, 1, 4)
	if !errors.Is(err, ErrTruncated) || st.Count != 10 || !bytes.Equal(small, pattern(100, 2)[:10]) {
		failf("eager truncation: %v %+v", err, st)
	}
	half := make([]byte, 50000)
	st, err = w.Recv(ctx, half, 1, 5)
	if !errors.Is(err, ErrTruncated) || st.Count != 50000 || !bytes.Equal(half, pattern(100000, 3)[:50000]) {
		failf("rendezvous truncation: %v %+v", err, st)
	}
	fs := make([]float64, 4)
	st, err = RecvSlice(ctx, w, fs, 1, 6)
	must(err, "recv floats")
	if Count[float64](st) != 3 || fs[0] != 1.5 || fs[1] != -2 || fs[2] != 3e300 {
		failf("floats: %v (%d)", fs, Count[float64](st))
	}
	return nil
}

func TestProbeTruncate(t *testing.T) { runOK(t, 2, "probe") }

// progBadInput: every bad argument is a clear error, and ProcNull and
// self-messages work.
func progBadInput(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	cases := []struct {
		err  error
		want error
	}{
		{w.Send(ctx, nil, w.Size(), 0), ErrRank},
		{w.Send(ctx, nil, -7, 0), ErrRank},
		{w.Send(ctx, nil, 0, -1), ErrTag},
		{w.Send(ctx, nil, 0, MaxTag+1), ErrTag},
		{func() error { _, err := w.Recv(ctx, nil, 99, 0); return err }(), ErrRank},
		{func() error { _, err := w.Irecv(nil, 0, -5); return err }(), ErrTag},
		{func() error { var c *Comm; return c.Send(ctx, nil, 0, 0) }(), ErrComm},
		{w.Free(), ErrComm},
		{func() error { _, err := w.Create(ctx, WorldGroup(w.Size()+1)); return err }(), ErrGroup},
	}
	for i, c := range cases {
		if !errors.Is(c.err, c.want) || !errors.Is(c.err, ErrInvalid) {
			failf("case %d: %v, want %v", i, c.err, c.want)
		}
	}
	if err := w.Send(ctx, []byte("x"), ProcNull, 0); err != nil {
		failf("send to ProcNull: %v", err)
	}
	if st, err := w.Recv(ctx, nil, ProcNull, 0); err != nil || st.Source != ProcNull {
		failf("recv from ProcNull: %v %+v", err, st)
	}
	// To oneself, eager and rendezvous, on world and on self.
	for _, c := range []*Comm{w, ep.Self()} {
		big := pattern(200000, 9)
		req, err := c.Isend(big, c.Rank(), 1)
		must(err, "isend to self")
		must(c.Send(ctx, []byte("hi"), c.Rank(), 2), "send to self")
		got := make([]byte, 200000)
		if _, err := c.Recv(ctx, got, c.Rank(), 1); err != nil || !bytes.Equal(got, big) {
			failf("big message to self: %v", err)
		}
		if st, err := c.Recv(ctx, got, c.Rank(), 2); err != nil || string(got[:st.Count]) != "hi" {
			failf("small message to self: %v", err)
		}
		_, err = req.Wait(ctx)
		must(err, "wait self send")
	}
	d, err := w.Dup(ctx)
	must(err, "dup")
	must(d.Free(), "free")
	if err := d.Send(ctx, nil, 0, 0); !errors.Is(err, ErrComm) {
		failf("send on a freed communicator: %v", err)
	}
	if err := d.Free(); !errors.Is(err, ErrComm) {
		failf("double free: %v", err)
	}
	return nil
}

func TestBadInput(t *testing.T) { runOK(t, 2, "badinput") }

func init() { progs.Add("progress", progProgress) }

// progProgress: with a progress goroutine, rank 0's endpoint drains 200
// sends of 16 KiB (three rings' worth) while its main goroutine sleeps,
// so rank 1's blocking sends finish long before rank 0 wakes.
func progProgress(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	const sleep = 2 * time.Second
	if w.Rank() == 0 {
		pctx, stop := context.WithCancel(ctx)
		go ep.Progress(pctx)
		time.Sleep(sleep)
		stop()
		buf := make([]byte, shm.Eager)
		for i := 0; i < 200; i++ {
			_, err := w.Recv(ctx, buf, 1, 1)
			must(err, "recv")
		}
		st, err := w.Recv(ctx, buf, 1, 2)
		must(err, "recv time")
		took, _ := time.ParseDuration(string(buf[:st.Count]))
		fmt.Printf("rank 1's sends took %v while rank 0 slept %v\n", took, sleep)
		if took > sleep/2 {
			failf("the progress goroutine did not drain: rank 1 took %v", took)
		}
		return nil
	}
	t0 := time.Now()
	for i := 0; i < 200; i++ {
		must(w.Send(ctx, make([]byte, shm.Eager), 0, 1), "send")
	}
	return w.Send(ctx, []byte(time.Since(t0).String()), 0, 2)
}

func TestProgressGoroutine(t *testing.T) { t.Log(runOK(t, 2, "progress")) }
