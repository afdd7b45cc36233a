//go:build linux

// Package collectives implements MPI's collective operations over fabric
// communicators: barrier, broadcast, reductions, gathers, scatters,
// all-to-all and scans, blocking and nonblocking (I…), on slices of any
// pointer-free element type.
//
// Each call builds a fabric.Schedule with an algorithm chosen by message
// and communicator size (see Force and docs/collectives.md) and starts it;
// the blocking forms wait on it. Nonblocking collectives progress inside
// any wait or test, and several may be outstanding on one communicator;
// every process must start a communicator's collectives in the same order.
//
// Errors are local, as MPI says: when a process fails, every survivor's
// collective over a communicator that includes it returns an error
// wrapping fabric.ErrProcFailed, but one process may have succeeded
// while another fails.
//
// A blocking collective returns ctx's error once ctx ends. The other
// processes' part of it cannot be withdrawn (MPI cannot cancel a
// collective either), so the communicator's collectives are then out of
// step at this process: use it for no further collectives.
package collectives

import (
	"context"
	"fmt"
	"reflect"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/elem"
	"github.com/rivet-hpc/rivet/internal/nodecoll"
	"github.com/rivet-hpc/rivet/internal/reduce"
	"github.com/rivet-hpc/rivet/op"
)

func checkType[T any]() error {
	if !elem.Plain[T]() {
		return fmt.Errorf("%w: %v", ErrType, reflect.TypeFor[T]())
	}
	return nil
}

func size[T any]() int { return elem.Size[T]() }

func bytesOf[T any](s []T) []byte { return elem.Bytes(s) }

// begin validates the communicator, the element type and (unless noRoot)
// the root, and begins a schedule.
func begin[T any](c *fabric.Comm, root int) (*fabric.Schedule, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil", fabric.ErrComm)
	}
	if c.IsInter() {
		return nil, errInterColl
	}
	if err := checkType[T](); err != nil {
		return nil, err
	}
	if root != noRoot && (root < 0 || root >= c.Size()) {
		return nil, fmt.Errorf("%w: root %d in a communicator of %d", fabric.ErrRank, root, c.Size())
	}
	return c.NewSchedule()
}

const noRoot = -1 << 30

// wait completes a blocking collective's request — or takes its error —
// and makes the outcome uniform across c's members if c's error
// uniformity asks for it (fabric.Comm.Uniform).
func wait(ctx context.Context, c *fabric.Comm, r fabric.Request, err error) error {
	if err == nil {
		_, err = r.Wait(ctx)
	}
	return c.Uniform(ctx, err) // (nil c: err)
}

func countErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCount}, args...)...)
}

// Barrier blocks until every process of c has entered it (MPI_Barrier);
// on an intercommunicator, until every process of the remote group has.
func Barrier(ctx context.Context, c *fabric.Comm) error {
	if c.IsInter() {
		return interBarrier(ctx, c)
	}
	if c != nil && choose("barrier", 0, c.Size(), true) == SharedFlags {
		if ok, err := nodecoll.Sync(ctx, c); ok {
			return c.Uniform(ctx, err)
		}
	}
	r, err := ibarrier(c)
	return wait(ctx, c, r, err)
}

// Ibarrier is the nonblocking Barrier.
func Ibarrier(c *fabric.Comm) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := ibarrier(c)
	return c.UniformRequest(u, r, err)
}

func ibarrier(c *fabric.Comm) (fabric.Request, error) {
	s, err := begin[byte](c, noRoot)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n := c.Rank(), c.Size()
	switch a := choose("barrier", 0, n, true); a {
	case Tree:
		barrierTree(s, me, n)
	case SharedFlags:
		if !nodecoll.Barrier(s) {
			barrierDissemination(s, me, n)
		}
	case Dissemination:
		barrierDissemination(s, me, n)
	default:
		return unwired(s, "barrier", a)
	}
	return s.Start()
}

// Bcast sends root's buf to every process's buf (MPI_Bcast). On an
// intercommunicator it goes from one group to the other: the root passes
// fabric.Root, the other members of its group fabric.ProcNull, and the
// members of the other group the root's rank in their remote group.
func Bcast[T any](ctx context.Context, c *fabric.Comm, buf []T, root int) error {
	if c.IsInter() {
		if err := checkType[T](); err != nil {
			return err
		}
		return interBcast(ctx, c, bytesOf(buf), root)
	}
	r, err := ibcast(c, buf, root)
	return wait(ctx, c, r, err)
}

// Ibcast is the nonblocking Bcast.
func Ibcast[T any](c *fabric.Comm, buf []T, root int) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := ibcast(c, buf, root)
	return c.UniformRequest(u, r, err)
}

func ibcast[T any](c *fabric.Comm, buf []T, root int) (fabric.Request, error) {
	s, err := begin[T](c, root)
	if err != nil {
		return fabric.Request{}, err
	}
	b, me, n := bytesOf(buf), c.Rank(), c.Size()
	switch a := choose("bcast", len(b), n, true); a {
	case ScatterAllgather:
		bcastScatterAllgather(s, b, size[T](), me, n, root)
	case Binomial:
		bcastBinomial(s, b, me, n, root)
	default:
		return unwired(s, "bcast", a)
	}
	return s.Start()
}

// Reduce combines every process's send with op into root's recv, in rank
// order (MPI_Reduce). With send nil, root's recv holds its operand (in
// place). recv matters only at root.
func Reduce[T any](ctx context.Context, c *fabric.Comm, send, recv []T, o op.Op[T], root int) error {
	r, err := ireduce(c, send, recv, o, root)
	return wait(ctx, c, r, err)
}

// Ireduce is the nonblocking Reduce.
func Ireduce[T any](c *fabric.Comm, send, recv []T, o op.Op[T], root int) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := ireduce(c, send, recv, o, root)
	return c.UniformRequest(u, r, err)
}

func ireduce[T any](c *fabric.Comm, send, recv []T, o op.Op[T], root int) (fabric.Request, error) {
	ro, err := collOp(o)
	if err != nil {
		return fabric.Request{}, err
	}
	if c != nil && c.Rank() == root && send != nil && len(send) != len(recv) {
		return fabric.Request{}, countErr("send has %d elements, recv %d", len(send), len(recv))
	}
	if c != nil && c.Rank() != root && send == nil {
		return fabric.Request{}, countErr("only the root may reduce in place")
	}
	s, err := begin[T](c, root)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n := c.Rank(), c.Size()
	var acc []byte
	if me == root {
		acc = bytesOf(recv)
		if send != nil {
			copy(acc, bytesOf(send))
		}
	} else {
		acc = s.Scratch(len(send) * size[T]())
		copy(acc, bytesOf(send))
	}
	if ro.Commutative || root == 0 {
		reduceBinomial(s, acc, ro, me, n, root)
		return s.Start()
	}
	// Rank order needs the tree rooted at rank 0; it then hands over.
	if me == 0 {
		reduceBinomial(s, acc, ro, me, n, 0)
		s.Send(acc, root)
		s.Next()
	} else {
		reduceBinomial(s, acc, ro, me, n, 0)
		if me == root {
			s.Recv(acc, 0)
			s.Next()
		}
	}
	return s.Start()
}

// Allreduce combines every process's send with op into every recv
// (MPI_Allreduce). With send nil, recv holds the operand (in place). On
// an intercommunicator, each group's recv gets the other group's sends
// combined (and there is no in place).
func Allreduce[T any](ctx context.Context, c *fabric.Comm, send, recv []T, o op.Op[T]) error {
	if c.IsInter() {
		if err := checkType[T](); err != nil {
			return err
		}
		return interAllreduce(ctx, c, send, recv, o)
	}
	r, err := iallreduce(ctx, c, send, recv, o, true)
	return wait(ctx, c, r, err)
}

// Iallreduce is the nonblocking Allreduce. (It never takes the
// shared_slots algorithm, which needs each call to complete before the
// next starts; MPI does not match blocking and nonblocking collectives
// with each other, so the two may differ.)
func Iallreduce[T any](c *fabric.Comm, send, recv []T, o op.Op[T]) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := iallreduce(context.Background(), c, send, recv, o, false)
	return c.UniformRequest(u, r, err)
}

// iallreduce starts an allreduce; a blocking one (ctx is its caller's)
// may instead run to completion here, returning the null request.
func iallreduce[T any](ctx context.Context, c *fabric.Comm, send, recv []T, o op.Op[T], blocking bool) (fabric.Request, error) {
	ro, err := collOp(o)
	if err != nil {
		return fabric.Request{}, err
	}
	if send != nil && len(send) != len(recv) {
		return fabric.Request{}, countErr("send has %d elements, recv %d", len(send), len(recv))
	}
	var algo Algorithm
	if c != nil {
		algo = choose("allreduce", len(recv)*size[T](), c.Size(), ro.Commutative)
	}
	if blocking && c != nil && checkType[T]() == nil {
		// The node algorithms run to completion here, or report that they
		// cannot serve and leave it to a schedule.
		var sb []byte
		if send != nil {
			sb = bytesOf(send)
		}
		switch algo {
		case SharedSlots:
			acc := bytesOf(recv)
			copy(acc, sb) // in place: sb is nil
			if ok, err := nodecoll.Allreduce(ctx, c, acc, ro.Fn); ok {
				return fabric.Request{}, err
			}
		case SharedChunks:
			if ok, err := nodecoll.AllreduceChunks(ctx, c, sb, bytesOf(recv), size[T](), ro.Fn); ok {
				return fabric.Request{}, err
			}
		}
	}
	s, err := begin[T](c, noRoot)
	if err != nil {
		return fabric.Request{}, err
	}
	acc, me, n := bytesOf(recv), c.Rank(), c.Size()
	if algo == SharedSlots || algo == SharedChunks {
		algo = allreduceByMessages(len(acc), ro.Commutative)
	}
	if algo == Ring && n > 1 {
		var sb []byte
		if send != nil {
			sb = bytesOf(send)
		}
		allreduceRing(s, sb, acc, ro, size[T](), me, n)
		return s.Start()
	}
	if send != nil {
		copy(acc, bytesOf(send))
	}
	switch algo {
	case Rabenseifner:
		allreduceRabenseifner(s, acc, ro, size[T](), me, n)
	case ReduceBcast:
		allreduceReduceBcast(s, acc, ro, size[T](), me, n)
	case RecursiveDoubling:
		allreduceRecursiveDoubling(s, acc, ro, me, n)
	default:
		return unwired(s, "allreduce", algo)
	}
	return s.Start()
}

// Gather collects every process's send into root's recv, in rank order
// (MPI_Gather); recv (root only) holds Size()·len(send) elements. With
// send nil at root, root's block is already in place in recv.
func Gather[T any](ctx context.Context, c *fabric.Comm, send, recv []T, root int) error {
	r, err := igather(c, send, recv, root)
	return wait(ctx, c, r, err)
}

// Igather is the nonblocking Gather.
func Igather[T any](c *fabric.Comm, send, recv []T, root int) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := igather(c, send, recv, root)
	return c.UniformRequest(u, r, err)
}

func igather[T any](c *fabric.Comm, send, recv []T, root int) (fabric.Request, error) {
	s, err := checkedRoot[T](c, root)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n := c.Rank(), c.Size()
	if me != root && send == nil {
		return abandon(s, countErr("only the root may gather in place"))
	}
	blk := len(send)
	if me == root {
		if send == nil {
			blk = len(recv) / n
		}
		if len(recv) != n*blk {
			return abandon(s, countErr("recv has %d elements, not %d×%d", len(recv), n, blk))
		}
	}
	sb, rb, esz := bytesOf(send), bytesOf(recv), size[T]()
	if me == root && send == nil {
		sb = rb[me*blk*esz : (me+1)*blk*esz]
	} else if me == root {
		copy(rb[me*blk*esz:], sb)
	}
	switch a := choose("gather", len(sb), n, true); a {
	case Linear:
		gatherLinear(s, sb, rb, equalBlocks(blk), esz, me, n, root)
	case Binomial:
		gatherBinomial(s, sb, rb, me, n, root)
	default:
		return unwired(s, "gather", a)
	}
	return s.Start()
}

// checkVector checks counts and displacements against a buffer of total
// elements.
func checkVector(counts, displs []int, n, total int) error {
	if len(counts) != n || len(displs) != n {
		return countErr("%d counts and %d displacements for %d processes", len(counts), len(displs), n)
	}
	for i := range counts {
		if counts[i] < 0 || displs[i] < 0 || displs[i]+counts[i] > total {
			return countErr("block %d (%d elements at %d) is outside a buffer of %d", i, counts[i], displs[i], total)
		}
	}
	return nil
}

// checkedRoot starts a rooted collective's schedule.
func checkedRoot[T any](c *fabric.Comm, root int) (*fabric.Schedule, error) {
	return begin[T](c, root)
}

// unwired fails a call whose chosen algorithm has no builder here: a
// mistake in this package, said so rather than quietly running another.
func unwired(s *fabric.Schedule, coll string, a Algorithm) (fabric.Request, error) {
	return abandon(s, fmt.Errorf("collectives: internal error: %s has no builder for algorithm %q", coll, a))
}

// abandon ends a schedule that was begun but cannot run: it still runs,
// empty, so that this process's collective sequence stays in step with
// the others', and its error is this one.
func abandon(s *fabric.Schedule, err error) (fabric.Request, error) {
	s.Then(func() error { return err })
	return s.Start()
}

// Gatherv is Gather with a count and displacement per process (MPI_Gatherv);
// counts and displs matter at root only.
func Gatherv[T any](ctx context.Context, c *fabric.Comm, send, recv []T, counts, displs []int, root int) error {
	r, err := igatherv(c, send, recv, counts, displs, root)
	return wait(ctx, c, r, err)
}

// Igatherv is the nonblocking Gatherv.
func Igatherv[T any](c *fabric.Comm, send, recv []T, counts, displs []int, root int) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := igatherv(c, send, recv, counts, displs, root)
	return c.UniformRequest(u, r, err)
}

func igatherv[T any](c *fabric.Comm, send, recv []T, counts, displs []int, root int) (fabric.Request, error) {
	s, err := checkedRoot[T](c, root)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n, esz := c.Rank(), c.Size(), size[T]()
	sb, rb := bytesOf(send), bytesOf(recv)
	if me == root {
		if err := checkVector(counts, displs, n, len(recv)); err != nil {
			return abandon(s, err)
		}
		if send != nil {
			if len(send) != counts[me] {
				return abandon(s, countErr("root sends %d elements, its count is %d", len(send), counts[me]))
			}
			copy(rb[displs[me]*esz:], sb)
		}
	}
	gatherLinear(s, sb, rb, layout{counts: counts, displs: displs}, esz, me, n, root)
	return s.Start()
}

// Scatter sends block i of root's send (Size() blocks of len(recv)
// elements) to process i's recv (MPI_Scatter). With recv nil at root,
// root's block stays in place in send.
func Scatter[T any](ctx context.Context, c *fabric.Comm, send, recv []T, root int) error {
	r, err := iscatter(c, send, recv, root)
	return wait(ctx, c, r, err)
}

// Iscatter is the nonblocking Scatter.
func Iscatter[T any](c *fabric.Comm, send, recv []T, root int) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := iscatter(c, send, recv, root)
	return c.UniformRequest(u, r, err)
}

func iscatter[T any](c *fabric.Comm, send, recv []T, root int) (fabric.Request, error) {
	s, err := checkedRoot[T](c, root)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n, esz := c.Rank(), c.Size(), size[T]()
	blk := len(recv)
	if me == root {
		if recv == nil {
			blk = len(send) / n
		}
		if len(send) != n*blk {
			return abandon(s, countErr("send has %d elements, not %d×%d", len(send), n, blk))
		}
	} else if recv == nil {
		return abandon(s, countErr("only the root may scatter in place"))
	}
	sb, rb := bytesOf(send), bytesOf(recv)
	if me == root && recv == nil {
		rb = s.Scratch(blk * esz) // the root's own block stays where it is
	}
	switch a := choose("scatter", blk*esz, n, true); a {
	case Linear:
		if me == root {
			copy(rb, sb[me*blk*esz:(me+1)*blk*esz])
		}
		scatterLinear(s, sb, rb, equalBlocks(blk), esz, me, n, root)
	case Binomial:
		scatterBinomial(s, sb, rb, me, n, root)
	default:
		return unwired(s, "scatter", a)
	}
	return s.Start()
}

// Scatterv is Scatter with a count and displacement per process
// (MPI_Scatterv); counts and displs matter at root only.
func Scatterv[T any](ctx context.Context, c *fabric.Comm, send []T, counts, displs []int, recv []T, root int) error {
	r, err := iscatterv(c, send, counts, displs, recv, root)
	return wait(ctx, c, r, err)
}

// Iscatterv is the nonblocking Scatterv.
func Iscatterv[T any](c *fabric.Comm, send []T, counts, displs []int, recv []T, root int) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := iscatterv(c, send, counts, displs, recv, root)
	return c.UniformRequest(u, r, err)
}

func iscatterv[T any](c *fabric.Comm, send []T, counts, displs []int, recv []T, root int) (fabric.Request, error) {
	s, err := checkedRoot[T](c, root)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n, esz := c.Rank(), c.Size(), size[T]()
	sb, rb := bytesOf(send), bytesOf(recv)
	if me == root {
		if err := checkVector(counts, displs, n, len(send)); err != nil {
			return abandon(s, err)
		}
		if recv != nil {
			if len(recv) != counts[me] {
				return abandon(s, countErr("root receives %d elements, its count is %d", len(recv), counts[me]))
			}
			copy(rb, layout{counts: counts, displs: displs}.at(sb, esz, me))
		}
	}
	scatterLinear(s, sb, rb, layout{counts: counts, displs: displs}, esz, me, n, root)
	return s.Start()
}

// Allgather collects every process's send into every recv, in rank order
// (MPI_Allgather); recv holds Size()·len(send) elements. With send nil,
// each process's block is already in place in recv. On an
// intercommunicator, each group's recv gets the other group's sends, in
// their rank order (and there is no in place).
func Allgather[T any](ctx context.Context, c *fabric.Comm, send, recv []T) error {
	if c.IsInter() {
		if err := checkType[T](); err != nil {
			return err
		}
		return interAllgather(ctx, c, send, recv)
	}
	r, err := iallgather(c, send, recv)
	return wait(ctx, c, r, err)
}

// Iallgather is the nonblocking Allgather.
func Iallgather[T any](c *fabric.Comm, send, recv []T) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := iallgather(c, send, recv)
	return c.UniformRequest(u, r, err)
}

func iallgather[T any](c *fabric.Comm, send, recv []T) (fabric.Request, error) {
	s, err := begin[T](c, noRoot)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n, esz := c.Rank(), c.Size(), size[T]()
	blk := len(send)
	if send == nil {
		blk = len(recv) / n
	}
	if len(recv) != n*blk {
		return abandon(s, countErr("recv has %d elements, not %d×%d", len(recv), n, blk))
	}
	rb := bytesOf(recv)
	if send != nil {
		copy(rb[me*blk*esz:], bytesOf(send))
	}
	switch a := choose("allgather", blk*esz, n, true); a {
	case RecursiveDoubling:
		allgatherRecursiveDoubling(s, rb, blk*esz, me, n)
	case Bruck:
		allgatherBruck(s, rb, blk*esz, me, n)
	case Ring:
		allgatherRing(s, rb, equalBlocks(blk), esz, me, n)
	default:
		return unwired(s, "allgather", a)
	}
	return s.Start()
}

// Allgatherv is Allgather with a count and displacement per process
// (MPI_Allgatherv).
func Allgatherv[T any](ctx context.Context, c *fabric.Comm, send, recv []T, counts, displs []int) error {
	r, err := iallgatherv(c, send, recv, counts, displs)
	return wait(ctx, c, r, err)
}

// Iallgatherv is the nonblocking Allgatherv.
func Iallgatherv[T any](c *fabric.Comm, send, recv []T, counts, displs []int) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := iallgatherv(c, send, recv, counts, displs)
	return c.UniformRequest(u, r, err)
}

func iallgatherv[T any](c *fabric.Comm, send, recv []T, counts, displs []int) (fabric.Request, error) {
	s, err := begin[T](c, noRoot)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n, esz := c.Rank(), c.Size(), size[T]()
	if err := checkVector(counts, displs, n, len(recv)); err != nil {
		return abandon(s, err)
	}
	rb := bytesOf(recv)
	if send != nil {
		if len(send) != counts[me] {
			return abandon(s, countErr("send has %d elements, this process's count is %d", len(send), counts[me]))
		}
		copy(rb[displs[me]*esz:], bytesOf(send))
	}
	allgatherRing(s, rb, layout{counts: counts, displs: displs}, esz, me, n)
	return s.Start()
}

// Alltoall sends block i of send to process i, which receives it as block
// me of its recv (MPI_Alltoall); both hold Size() equal blocks.
func Alltoall[T any](ctx context.Context, c *fabric.Comm, send, recv []T) error {
	r, err := ialltoall(c, send, recv)
	return wait(ctx, c, r, err)
}

// Ialltoall is the nonblocking Alltoall.
func Ialltoall[T any](c *fabric.Comm, send, recv []T) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := ialltoall(c, send, recv)
	return c.UniformRequest(u, r, err)
}

func ialltoall[T any](c *fabric.Comm, send, recv []T) (fabric.Request, error) {
	s, err := begin[T](c, noRoot)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n, esz := c.Rank(), c.Size(), size[T]()
	if len(send) != len(recv) || len(send)%n != 0 {
		return abandon(s, countErr("send has %d elements and recv %d; both must be %d equal blocks", len(send), len(recv), n))
	}
	blk := len(send) / n
	sb, rb := bytesOf(send), bytesOf(recv)
	switch a := choose("alltoall", blk*esz, n, true); a {
	case Bruck:
		alltoallBruck(s, sb, rb, blk*esz, me, n)
	case Linear:
		alltoallLinear(s, sb, rb, equalBlocks(blk), equalBlocks(blk), esz, me, n)
	case Pairwise:
		alltoallPairwise(s, sb, rb, equalBlocks(blk), equalBlocks(blk), esz, me, n)
	default:
		return unwired(s, "alltoall", a)
	}
	return s.Start()
}

// Alltoallv is Alltoall with a count and displacement per block on both
// sides (MPI_Alltoallv).
func Alltoallv[T any](ctx context.Context, c *fabric.Comm, send []T, scounts, sdispls []int, recv []T, rcounts, rdispls []int) error {
	r, err := ialltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls)
	return wait(ctx, c, r, err)
}

// Ialltoallv is the nonblocking Alltoallv.
func Ialltoallv[T any](c *fabric.Comm, send []T, scounts, sdispls []int, recv []T, rcounts, rdispls []int) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := ialltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls)
	return c.UniformRequest(u, r, err)
}

func ialltoallv[T any](c *fabric.Comm, send []T, scounts, sdispls []int, recv []T, rcounts, rdispls []int) (fabric.Request, error) {
	s, err := begin[T](c, noRoot)
	if err != nil {
		return fabric.Request{}, err
	}
	me, n, esz := c.Rank(), c.Size(), size[T]()
	if err := checkVector(scounts, sdispls, n, len(send)); err != nil {
		return abandon(s, err)
	}
	if err := checkVector(rcounts, rdispls, n, len(recv)); err != nil {
		return abandon(s, err)
	}
	if scounts[me] != rcounts[me] {
		return abandon(s, countErr("this process sends itself %d elements but expects %d", scounts[me], rcounts[me]))
	}
	sb, rb := bytesOf(send), bytesOf(recv)
	sl, rl := layout{counts: scounts, displs: sdispls}, layout{counts: rcounts, displs: rdispls}
	switch a := choose("alltoallv", 0, n, true); a {
	case Linear:
		alltoallLinear(s, sb, rb, sl, rl, esz, me, n)
	case Pairwise:
		alltoallPairwise(s, sb, rb, sl, rl, esz, me, n)
	default:
		return unwired(s, "alltoallv", a)
	}
	return s.Start()
}

// ReduceScatter reduces send (the sum of counts elements) with op and
// leaves block i, of counts[i] elements, in process i's recv
// (MPI_Reduce_scatter).
func ReduceScatter[T any](ctx context.Context, c *fabric.Comm, send, recv []T, counts []int, o op.Op[T]) error {
	r, err := ireduceScatter(c, send, recv, counts, o)
	return wait(ctx, c, r, err)
}

// IreduceScatter is the nonblocking ReduceScatter.
func IreduceScatter[T any](c *fabric.Comm, send, recv []T, counts []int, o op.Op[T]) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := ireduceScatter(c, send, recv, counts, o)
	return c.UniformRequest(u, r, err)
}

func ireduceScatter[T any](c *fabric.Comm, send, recv []T, counts []int, o op.Op[T]) (fabric.Request, error) {
	ro, err := collOp(o)
	if err != nil {
		return fabric.Request{}, err
	}
	s, err := begin[T](c, noRoot)
	if err != nil {
		return fabric.Request{}, err
	}
	n := c.Size()
	if len(counts) != n {
		return abandon(s, countErr("%d counts for %d processes", len(counts), n))
	}
	displs, total := make([]int, n), 0
	for i, k := range counts {
		if k < 0 {
			return abandon(s, countErr("count %d is negative", i))
		}
		displs[i], total = total, total+k
	}
	return reduceScatter(s, c, bytesOf(send), bytesOf(recv), len(send), len(recv), layout{counts: counts, displs: displs}, total, ro, size[T]())
}

// reduceScatter checks the buffers against the layout and builds the
// schedule; sn and rn are the buffers' lengths in elements.
func reduceScatter(s *fabric.Schedule, c *fabric.Comm, send, recv []byte, sn, rn int, l layout, total int, ro reduce.Untyped, esz int) (fabric.Request, error) {
	me, n := c.Rank(), c.Size()
	if sn != total || rn != l.count(me) {
		return abandon(s, countErr("send has %d elements (counts sum to %d), recv %d (count %d)", sn, total, rn, l.count(me)))
	}
	acc := s.Scratch(len(send))
	copy(acc, send)
	switch a := choose("reduce_scatter", total*esz/n, n, ro.Commutative); a {
	case Ring:
		reduceScatterRing(s, acc, l, ro, esz, me, n)
		s.Copy(recv, l.at(acc, esz, me))
	case ReduceScatterv:
		// Reduce to rank 0 in rank order, then scatter the blocks.
		reduceBinomial(s, acc, ro, me, n, 0)
		scatterLinear(s, acc, recv, l, esz, me, n, 0)
		if me == 0 {
			s.Copy(recv, l.at(acc, esz, 0))
		}
	default:
		return unwired(s, "reduce_scatter", a)
	}
	return s.Start()
}

// ReduceScatterBlock is ReduceScatter with equal blocks of len(recv)
// elements (MPI_Reduce_scatter_block).
func ReduceScatterBlock[T any](ctx context.Context, c *fabric.Comm, send, recv []T, o op.Op[T]) error {
	r, err := ireduceScatterBlock(c, send, recv, o)
	return wait(ctx, c, r, err)
}

// IreduceScatterBlock is the nonblocking ReduceScatterBlock.
func IreduceScatterBlock[T any](c *fabric.Comm, send, recv []T, o op.Op[T]) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := ireduceScatterBlock(c, send, recv, o)
	return c.UniformRequest(u, r, err)
}

func ireduceScatterBlock[T any](c *fabric.Comm, send, recv []T, o op.Op[T]) (fabric.Request, error) {
	ro, err := collOp(o)
	if err != nil {
		return fabric.Request{}, err
	}
	s, err := begin[T](c, noRoot)
	if err != nil {
		return fabric.Request{}, err
	}
	return reduceScatter(s, c, bytesOf(send), bytesOf(recv), len(send), len(recv), equalBlocks(len(recv)), len(recv)*c.Size(), ro, size[T]())
}

// Scan leaves in process i's recv the reduction of send over processes
// 0…i (MPI_Scan). With send nil, recv holds the operand (in place).
func Scan[T any](ctx context.Context, c *fabric.Comm, send, recv []T, o op.Op[T]) error {
	r, err := iscan(c, send, recv, o)
	return wait(ctx, c, r, err)
}

// Iscan is the nonblocking Scan.
func Iscan[T any](c *fabric.Comm, send, recv []T, o op.Op[T]) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := iscan(c, send, recv, o)
	return c.UniformRequest(u, r, err)
}

func iscan[T any](c *fabric.Comm, send, recv []T, o op.Op[T]) (fabric.Request, error) {
	return scan(c, send, recv, o, false)
}

// Exscan leaves in process i's recv the reduction over processes 0…i-1
// (MPI_Exscan); rank 0's recv is left as it was.
func Exscan[T any](ctx context.Context, c *fabric.Comm, send, recv []T, o op.Op[T]) error {
	r, err := iexscan(c, send, recv, o)
	return wait(ctx, c, r, err)
}

// Iexscan is the nonblocking Exscan.
func Iexscan[T any](c *fabric.Comm, send, recv []T, o op.Op[T]) (fabric.Request, error) {
	u, err := c.ReserveUniform()
	if err != nil {
		return fabric.Request{}, err
	}
	r, err := iexscan(c, send, recv, o)
	return c.UniformRequest(u, r, err)
}

func iexscan[T any](c *fabric.Comm, send, recv []T, o op.Op[T]) (fabric.Request, error) {
	return scan(c, send, recv, o, true)
}

func scan[T any](c *fabric.Comm, send, recv []T, o op.Op[T], exclusive bool) (fabric.Request, error) {
	ro, err := collOp(o)
	if err != nil {
		return fabric.Request{}, err
	}
	if send != nil && len(send) != len(recv) {
		return fabric.Request{}, countErr("send has %d elements, recv %d", len(send), len(recv))
	}
	s, err := begin[T](c, noRoot)
	if err != nil {
		return fabric.Request{}, err
	}
	sb := bytesOf(send)
	if send == nil {
		sb = s.Scratch(len(recv) * size[T]())
		copy(sb, bytesOf(recv))
	}
	scanRecursiveDoubling(s, sb, bytesOf(recv), ro, c.Rank(), c.Size(), exclusive)
	return s.Start()
}
