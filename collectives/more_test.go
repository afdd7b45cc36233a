//go:build linux

package collectives

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/op"
)

func init() {
	progs.Add("big", progBig)
	progs.Add("nonblocking", progNonblocking)
	progs.Add("ops", progOps)
	progs.Add("bad", progBad)
	progs.Add("kill", progKill)
	progs.Add("chunks", progChunks)
}

// Triple is a 12-byte element: the staged chunks of the shared_chunks
// allreduce then hold a number of elements that is no power of two.
type Triple [3]int32

// then combines f (lower ranks) with g: associative, not commutative.
func (f Triple) then(g Triple) Triple {
	return Triple{int32(int64(f[0]) * int64(g[0]) % mod), int32((int64(g[0])*int64(f[1]) + int64(g[1])) % mod), f[2] ^ g[2]}
}

var thenTriples = op.New("then", false, func(in, inout []Triple) {
	for i, f := range in {
		inout[i] = f.then(inout[i])
	}
})

func tval(r, i int) Triple { return Triple{int32(r + 2 + i%5), int32(r*13 + i%1000), int32(r*i + 7)} }

// triples is the reference: every rank's k elements folded in rank order.
func triples(n, k int) []Triple {
	want := make([]Triple, k)
	for i := range want {
		want[i] = tval(n-1, i)
		for r := n - 2; r >= 0; r-- {
			want[i] = tval(r, i).then(want[i])
		}
	}
	return want
}

// progChunks: shared_chunks with 12-byte elements and a non-commutative
// op, at lengths around its 256 KiB chunks and ones that leave some
// processes' shares empty; in place and not.
func progChunks(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	if err := Force("allreduce", SharedChunks); err != nil {
		return err
	}
	defer Force("allreduce", Auto)
	const chunk = 256 << 10 / 12
	for _, k := range []int{1, n - 1, n + 1, 1000, chunk - 1, chunk, chunk + 1, 2*chunk + 3, 5 * chunk} {
		want := triples(n, k)
		send := make([]Triple, k)
		for i := range send {
			send[i] = tval(me, i)
		}
		got := make([]Triple, k)
		if err := Allreduce(ctx, c, send, got, thenTriples); err != nil {
			return fmt.Errorf("%d elements: %w", k, err)
		}
		if !slices.Equal(got, want) {
			return fail("%d elements: wrong", k)
		}
		if err := Allreduce(ctx, c, nil, send, thenTriples); err != nil {
			return fmt.Errorf("%d elements in place: %w", k, err)
		}
		if !slices.Equal(send, want) {
			return fail("%d elements in place: wrong", k)
		}
	}
	// Every process compares every length, so all see a mismatch — which
	// only the staged chunks do (recursive doubling, which serves where
	// they cannot, sees it at some processes) — and stay in step.
	k := chunk + 1
	if me == 0 {
		k++
	}
	err := Allreduce(ctx, c, make([]Triple, k), make([]Triple, k), thenTriples)
	if !errors.Is(err, fabric.ErrMismatch) {
		return fail("mismatched lengths: %v", err)
	}
	one := []Triple{tval(me, 0)}
	if err := Allreduce(ctx, c, nil, one, thenTriples); err != nil || one[0] != triples(n, 1)[0] {
		return fail("after the mismatch: %v %v", one, err)
	}
	return nil
}

func TestSharedChunks(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { runOK(t, n, "chunks") })
	}
}

// progBig: 4 MiB through the long-message algorithms of every collective
// that has them, each algorithm forced.
func progBig(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	const k = 4 << 20 / 8
	want := sumOver(n, k)
	if err := each("allreduce", func(Algorithm) error {
		got := make([]int64, k)
		if err := Allreduce(ctx, c, ints(me, k), got, op.Sum[int64]()); err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fail("4 MiB allreduce wrong")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := each("bcast", func(Algorithm) error {
		buf := make([]int64, k)
		if me == 1 {
			buf = ints(1, k)
		}
		if err := Bcast(ctx, c, buf, 1); err != nil {
			return err
		}
		if !slices.Equal(buf, ints(1, k)) {
			return fail("4 MiB bcast wrong")
		}
		return nil
	}); err != nil {
		return err
	}
	// The block collectives with 4 MiB in all.
	blk := k / n
	all := blocks(n, blk)
	if err := checkAllgather(ctx, c, blk); err != nil {
		return err
	}
	if err := each("gather", func(Algorithm) error {
		got := make([]int64, n*blk)
		if err := Gather(ctx, c, ints(me, blk), got, n-1); err != nil {
			return err
		}
		if me == n-1 && !slices.Equal(got, all) {
			return fail("4 MiB gather wrong")
		}
		mine := make([]int64, blk)
		if err := Scatter(ctx, c, all, mine, 0); err != nil {
			return err
		}
		if !slices.Equal(mine, ints(me, blk)) {
			return fail("4 MiB scatter wrong")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := checkAlltoall(ctx, c, blk); err != nil {
		return err
	}
	return each("reduce_scatter", func(Algorithm) error {
		got := make([]int64, blk)
		if err := ReduceScatterBlock(ctx, c, ints(me, n*blk), got, op.Sum[int64]()); err != nil {
			return err
		}
		if !slices.Equal(got, sumOver(n, n*blk)[me*blk:(me+1)*blk]) {
			return fail("4 MiB reduce_scatter wrong")
		}
		return nil
	})
}

func TestFourMiB(t *testing.T) {
	for _, n := range []int{3, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { runOK(t, n, "big") })
	}
}

// TestFourMiBOverVerbs is TestFourMiB with every peer over RDMA.
func TestFourMiBOverVerbs(t *testing.T) {
	devs := testutil.RXEDevices(t)
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			runOK(t, n, "big", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+strings.Join(devs, ","))
		})
	}
}

// progNonblocking: four different collectives outstanding at once on one
// communicator, started in one order and waited for in the other.
func progNonblocking(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	for round := 0; round < 20; round++ {
		sum := make([]int64, 100)
		buf := make([]int64, 5000)
		if me == round%n {
			buf = ints(round, 5000)
		}
		all := make([]int64, n*3)
		var reqs [4]fabric.Request
		var err error
		if reqs[0], err = Iallreduce(c, ints(me, 100), sum, op.Sum[int64]()); err != nil {
			return err
		}
		if reqs[1], err = Ibcast(c, buf, round%n); err != nil {
			return err
		}
		if reqs[2], err = Ibarrier(c); err != nil {
			return err
		}
		if reqs[3], err = Iallgather(c, ints(me+round, 3), all); err != nil {
			return err
		}
		for i := 3; i >= 0; i-- {
			if _, err := reqs[i].Wait(ctx); err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
		}
		if !slices.Equal(sum, sumOver(n, 100)) || !slices.Equal(buf, ints(round, 5000)) {
			return fail("round %d: allreduce or bcast wrong", round)
		}
		for r := 0; r < n; r++ {
			if !slices.Equal(all[r*3:r*3+3], ints(r+round, 3)) {
				return fail("round %d: allgather wrong", round)
			}
		}
	}
	return nil
}

func TestNonblockingOverlap(t *testing.T) { runOK(t, 4, "nonblocking") }

// progOps: every built-in operation on a few types, minloc/maxloc on pairs.
func progOps(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	x := []float64{float64(me) + 0.5, -float64(me), 3}
	check := func(name string, o op.Op[float64], want []float64) error {
		got := make([]float64, len(x))
		if err := Allreduce(ctx, c, x, got, o); err != nil {
			return err
		}
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-9 {
				return fail("%s: got %v, want %v", name, got, want)
			}
		}
		return nil
	}
	var sum, prod, mn, mx [3]float64
	prod = [3]float64{1, 1, 1}
	mn = [3]float64{math.Inf(1), math.Inf(1), math.Inf(1)}
	mx = [3]float64{math.Inf(-1), math.Inf(-1), math.Inf(-1)}
	for r := 0; r < n; r++ {
		v := []float64{float64(r) + 0.5, -float64(r), 3}
		for i := range v {
			sum[i] += v[i]
			prod[i] *= v[i]
			mn[i] = min(mn[i], v[i])
			mx[i] = max(mx[i], v[i])
		}
	}
	for _, tc := range []struct {
		name string
		op   op.Op[float64]
		want [3]float64
	}{{"sum", op.Sum[float64](), sum}, {"prod", op.Prod[float64](), prod}, {"min", op.Min[float64](), mn}, {"max", op.Max[float64](), mx}} {
		if err := check(tc.name, tc.op, tc.want[:]); err != nil {
			return err
		}
	}
	bits := []uint32{1 << uint(me), uint32(me), 0xff}
	got := make([]uint32, 3)
	for _, tc := range []struct {
		op   op.Op[uint32]
		want func(a, b uint32) uint32
		init uint32
	}{{op.Band[uint32](), func(a, b uint32) uint32 { return a & b }, ^uint32(0)}, {op.Bor[uint32](), func(a, b uint32) uint32 { return a | b }, 0}, {op.Bxor[uint32](), func(a, b uint32) uint32 { return a ^ b }, 0}} {
		if err := Allreduce(ctx, c, bits, got, tc.op); err != nil {
			return err
		}
		for i := range got {
			w := tc.init
			for r := 0; r < n; r++ {
				w = tc.want(w, []uint32{1 << uint(r), uint32(r), 0xff}[i])
			}
			if got[i] != w {
				return fail("%s: element %d is %#x, want %#x", tc.op.Name(), i, got[i], w)
			}
		}
	}
	logic := []int32{int32(me % 2), 1, 0}
	lg := make([]int32, 3)
	if err := Allreduce(ctx, c, logic, lg, op.Land[int32]()); err != nil || lg[0] != 0 || lg[1] != 1 || lg[2] != 0 {
		return fail("land %v %v", lg, err)
	}
	if err := Allreduce(ctx, c, logic, lg, op.Lor[int32]()); err != nil || lg[0] != 1 || lg[1] != 1 || lg[2] != 0 {
		return fail("lor %v %v", lg, err)
	}
	if err := Allreduce(ctx, c, logic, lg, op.Lxor[int32]()); err != nil || lg[0] != int32((n/2)%2) || lg[1] != int32(n%2) || lg[2] != 0 {
		return fail("lxor %v %v", lg, err)
	}
	// MinLoc/MaxLoc: rank r offers value (r-1)², so ranks 0 and 2 tie.
	v := float64((me - 1) * (me - 1))
	loc := []op.Loc[float64]{{Value: v, Index: int32(me)}}
	out := make([]op.Loc[float64], 1)
	if err := Allreduce(ctx, c, loc, out, op.MinLoc[float64]()); err != nil || out[0] != (op.Loc[float64]{Value: 0, Index: 1}) {
		return fail("minloc %v %v", out, err)
	}
	if err := Allreduce(ctx, c, loc, out, op.MaxLoc[float64]()); err != nil || out[0] != (op.Loc[float64]{Value: float64((n - 2) * (n - 2)), Index: int32(n - 1)}) {
		return fail("maxloc %v %v", out, err)
	}
	return nil
}

func TestOps(t *testing.T) { runOK(t, 4, "ops") }

// progBad: bad arguments are clear errors, and afterwards the
// communicator still works (the processes' collectives stayed in step).
func progBad(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	cases := []struct {
		err  error
		want error
	}{
		{Bcast(ctx, c, make([]int64, 1), n), fabric.ErrRank},
		{Bcast(ctx, c, make([]int64, 1), -1), fabric.ErrRank},
		{Allreduce(ctx, c, make([]int64, 2), make([]int64, 2), op.Op[int64]{}), op.ErrOp},
		{Allreduce(ctx, c, make([]int64, 2), make([]int64, 2), op.Replace[int64]()), op.ErrOp},
		{Allreduce(ctx, c, make([]int64, 2), make([]int64, 2), op.NoOp[int64]()), op.ErrOp},
		{Allreduce(ctx, c, make([]int64, 2), make([]int64, 3), op.Sum[int64]()), ErrCount},
		{Bcast(ctx, c, make([]struct{ next *int }, 1), 0), ErrType},
		{Bcast(ctx, (*fabric.Comm)(nil), make([]int64, 1), 0), fabric.ErrComm},
	}
	for i, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			return fail("case %d: %v, want %v", i, tc.err, tc.want)
		}
	}
	// Detected at the call, after the schedule began: every rank still
	// takes part, so the next collective is in step.
	if err := Alltoall(ctx, c, make([]int64, n+1), make([]int64, n+1)); !errors.Is(err, ErrCount) {
		return fail("alltoall with %d elements: %v", n+1, err)
	}
	// Mismatched between ranks: rank 0 broadcasts more than the others
	// expect; the mismatch is an error where it is seen.
	cnt := 4
	if me == 0 {
		cnt = 8
	}
	err := Bcast(ctx, c, make([]int64, cnt), 0)
	if me != 0 && !errors.Is(err, fabric.ErrMismatch) && !errors.Is(err, fabric.ErrTruncated) {
		return fail("mismatched bcast: %v", err)
	}
	// A small allreduce whose lengths differ (on one node: through shared
	// memory) is a mismatch at every rank, which all see every length.
	slots := forcedFor("allreduce") == Auto || forcedFor("allreduce") == SharedSlots
	for r := 0; r < n; r++ {
		slots = slots && (r == me || ep.Provider(r) == "shm")
	}
	err = Allreduce(ctx, c, make([]int64, cnt), make([]int64, cnt), op.Sum[int64]())
	if slots && !errors.Is(err, fabric.ErrMismatch) {
		return fail("mismatched allreduce through shared memory: %v", err)
	}
	// Still in step.
	got := make([]int64, 1)
	if err := Allreduce(ctx, c, []int64{1}, got, op.Sum[int64]()); err != nil || got[0] != int64(n) {
		return fail("after bad calls: %v %v", got, err)
	}
	return nil
}

func TestBadInput(t *testing.T) { runOK(t, 3, "bad") }

// progKill: rank 2 dies while the others are inside a collective; every
// survivor returns — with an error wrapping ErrProcFailed, or success
// where its result did not depend on rank 2 — within the bound.
func progKill(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	which := os.Getenv("RIVET_COLL_KILL")
	// The others tell rank 2 they are about to enter the collective; it
	// dies once all have.
	const ready = 99
	if me == 2 {
		for r := 0; r < n-1; r++ {
			if _, err := c.Recv(ctx, make([]byte, 1), fabric.AnySource, ready); err != nil {
				return err
			}
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	if err := c.Send(ctx, []byte{1}, 2, ready); err != nil {
		return err
	}
	t0 := time.Now()
	var err error
	big := make([]int64, 1<<16)
	counts, displs := make([]int, n), make([]int, n)
	for i := range counts {
		counts[i], displs[i] = 100, 100*i
	}
	switch which {
	case "barrier":
		err = Barrier(ctx, c)
	case "bcast":
		err = Bcast(ctx, c, big, 2)
	case "reduce":
		err = Reduce(ctx, c, big, make([]int64, len(big)), op.Sum[int64](), 0)
	case "allreduce":
		err = Allreduce(ctx, c, big, make([]int64, len(big)), op.Sum[int64]())
	case "allreduce_ring": // by messages; "allreduce" takes shared_chunks
		Force("allreduce", Ring)
		err = Allreduce(ctx, c, big, make([]int64, len(big)), op.Sum[int64]())
	case "allreduce_small": // shared_slots
		err = Allreduce(ctx, c, big[:8], make([]int64, 8), op.Sum[int64]())
	case "gather":
		err = Gather(ctx, c, big[:100], make([]int64, 100*n), 0)
	case "scatter":
		err = Scatter(ctx, c, make([]int64, 100*n), big[:100], 2)
	case "allgather":
		err = Allgather(ctx, c, big[:100], make([]int64, 100*n))
	case "alltoall":
		err = Alltoall(ctx, c, make([]int64, 100*n), make([]int64, 100*n))
	case "reduce_scatter":
		err = ReduceScatterBlock(ctx, c, make([]int64, 100*n), make([]int64, 100), op.Sum[int64]())
	case "scan":
		err = Scan(ctx, c, big[:100], make([]int64, 100), op.Sum[int64]())
	case "exscan":
		err = Exscan(ctx, c, big[:100], make([]int64, 100), op.Sum[int64]())
	case "gatherv":
		err = Gatherv(ctx, c, big[:100], make([]int64, 100*n), counts, displs, 0)
	case "scatterv":
		err = Scatterv(ctx, c, make([]int64, 100*n), counts, displs, big[:100], 2)
	case "allgatherv":
		err = Allgatherv(ctx, c, big[:100], make([]int64, 100*n), counts, displs)
	case "alltoallv":
		err = Alltoallv(ctx, c, make([]int64, 100*n), counts, displs, make([]int64, 100*n), counts, displs)
	case "reduce_scatterv":
		err = ReduceScatter(ctx, c, make([]int64, 100*n), make([]int64, 100), counts, op.Sum[int64]())
	case "iallreduce":
		var r fabric.Request
		if r, err = Iallreduce(c, big, make([]int64, len(big)), op.Sum[int64]()); err == nil {
			_, err = r.Wait(ctx)
		}
	default:
		return fail("no collective %q to kill a rank in", which)
	}
	took := time.Since(t0)
	fmt.Printf("%s: returned after %v: %v\n", which, took.Round(time.Millisecond), err)
	if err != nil && !errors.Is(err, fabric.ErrProcFailed) {
		return fail("%s: error that is not a process failure: %v", which, err)
	}
	if took > 5*time.Second {
		return fail("%s: took %v", which, took)
	}
	return nil
}

func TestRankKilled(t *testing.T) {
	for _, coll := range []string{"barrier", "bcast", "reduce", "allreduce", "allreduce_ring", "allreduce_small", "gather", "scatter", "allgather", "alltoall", "reduce_scatter", "scan",
		"exscan", "gatherv", "scatterv", "allgatherv", "alltoallv", "reduce_scatterv", "iallreduce"} {
		t.Run(coll, func(t *testing.T) {
			out, errs, st := runJob(t, 4, "kill", true, "RIVET_COLL_KILL="+coll)
			if st != 137 {
				t.Fatalf("status %d, want 137\n%s\n%s", st, out, errs)
			}
			for _, r := range []int{0, 1, 3} {
				if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("survivor %d did not return cleanly:\n%s\n%s", r, out, errs)
				}
			}
			if !strings.Contains(out, "process failed") {
				t.Errorf("no survivor saw the failure:\n%s", out)
			}
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "returned after") {
					t.Log(l)
				}
			}
		})
	}
}

func init() { progs.Add("ctx", progCtx) }

// progCtx: a blocking collective that a peer never joins returns the
// context's error once it ends, promptly.
func progCtx(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	// Rank 1 never joins the collectives: it waits for rank 0 to say that
	// they are over.
	const done = 77
	if c.Rank() == 1 {
		_, err := c.Recv(ctx, make([]byte, 1), 0, done)
		return err
	}
	defer c.Send(ctx, []byte{1}, 1, done)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := Allreduce(short, c, []int64{1}, make([]int64, 1), op.Sum[int64]())
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > time.Second {
		return fail("allreduce with a 100 ms deadline: %v after %v", err, time.Since(t0))
	}
	short, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	t0 = time.Now()
	if err := Barrier(short, c); !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > time.Second {
		return fail("barrier with a 100 ms deadline: %v after %v", err, time.Since(t0))
	}
	return nil
}

func TestContextEnds(t *testing.T) { runOK(t, 2, "ctx") }

// TestAllreduceSelection pins the size rules of the allreduce table.
func TestAllreduceSelection(t *testing.T) {
	for _, c := range []struct {
		bytes, n    int
		commutative bool
		want        Algorithm
	}{
		{8, 2, true, SharedSlots},
		{1024, 64, true, SharedSlots}, // up to 1 KiB, whatever the count
		{4096, 4, true, SharedSlots},  // 16 KiB in all
		{2048, 8, true, SharedSlots},
		{4096, 8, true, RecursiveDoubling}, // 32 KiB in all
		{8 << 10, 2, true, SharedChunks},
		{1 << 20, 4, false, SharedChunks}, // folds in rank order
	} {
		if got := choose("allreduce", c.bytes, c.n, c.commutative); got != c.want {
			t.Errorf("allreduce of %d bytes on %d (commutative %v): %s, want %s", c.bytes, c.n, c.commutative, got, c.want)
		}
	}
	// Where the node algorithms cannot serve.
	for _, c := range []struct {
		bytes       int
		commutative bool
		want        Algorithm
	}{
		{8, true, RecursiveDoubling},
		{8 << 10, true, RecursiveDoubling},
		{32 << 10, true, Ring},
		{32 << 10, false, RecursiveDoubling},
	} {
		if got := allreduceByMessages(c.bytes, c.commutative); got != c.want {
			t.Errorf("allreduce of %d bytes by messages (commutative %v): %s, want %s", c.bytes, c.commutative, got, c.want)
		}
	}
}
