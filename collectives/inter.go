//go:build linux

package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

// Collectives on intercommunicators (MPI 4.1 §6.2.2), the ones recovery
// code uses: Barrier, Bcast, Allreduce and Allgather. Each group works
// over its own Local communicator, and the two groups' rank 0 (their
// leaders) trade what their groups made in one exchange across. A status
// word travels with every exchange and every hand-out, and every member
// takes every step whatever the earlier ones did: a failure on one side
// ends the call with an error on the other, never with a hang. Every
// member makes one schedule on the intercommunicator per call, empty but
// for the leaders (and a Bcast's root), so that the schedules' tags stay
// matched.

// errInterColl is the error of a collective an intercommunicator does
// not take.
var errInterColl = fmt.Errorf("%w: an intercommunicator takes Barrier, Bcast, Allreduce and Allgather (Merge it for the others)", fabric.ErrComm)

// The status words of an intercommunicator collective's exchanges.
const (
	stOK uint64 = iota
	stFailed
	stRevoked
	stOther
)

func statusOf(err error) uint64 {
	switch {
	case err == nil:
		return stOK
	case errors.Is(err, fabric.ErrRevoked):
		return stRevoked
	case errors.Is(err, fabric.ErrProcFailed):
		return stFailed
	}
	return stOther
}

// errOf is the error a status word from elsewhere stands for.
func errOf(st uint64, where string) error {
	switch st {
	case stOK:
		return nil
	case stRevoked:
		return fmt.Errorf("%w: collectives: %s: revoked", fabric.ErrRevoked, where)
	case stFailed:
		return fmt.Errorf("%w: collectives: %s: a process failed", fabric.ErrProcFailed, where)
	}
	return fmt.Errorf("collectives: %s: failed", where)
}

// across makes this member's schedule on intercommunicator c: the leader
// sends out and receives into in (either may be nil) with the remote
// leader — or, given a remote rank peer ≥ 0, this member does — and the
// others do nothing.
func across(ctx context.Context, c *fabric.Comm, out, in []byte, peer int) error {
	s, err := c.NewSchedule()
	if err != nil {
		return err
	}
	if peer >= 0 {
		if out != nil {
			s.Send(out, peer)
		}
		if in != nil {
			s.Recv(in, peer)
		}
	}
	r, err := s.Start()
	if err != nil {
		return err
	}
	_, err = r.Wait(ctx)
	return err
}

// leader is the remote rank this member trades with: 0 for the leader,
// -1 for the others.
func leader(c *fabric.Comm) int {
	if c.Rank() == 0 {
		return 0
	}
	return -1
}

// handOut gives the local group what its leader got: buf's first word is
// the status, the rest the data. It returns the first error among err
// (this member's own), the hand-out's and the status's.
func handOut(ctx context.Context, c *fabric.Comm, buf []byte, err error, where string) error {
	l := c.Local()
	if c.Rank() == 0 {
		binary.LittleEndian.PutUint64(buf, max(binary.LittleEndian.Uint64(buf), statusOf(err)))
	}
	berr := Bcast(ctx, l, buf, 0)
	if err != nil {
		return err
	}
	if berr != nil {
		return berr
	}
	return errOf(binary.LittleEndian.Uint64(buf), where)
}

// withStatus is a buffer of a status word, err's, and n bytes of data.
func withStatus(n int, err error) []byte {
	b := make([]byte, 8+n)
	binary.LittleEndian.PutUint64(b, statusOf(err))
	return b
}

// first is the first non-nil error.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// interBarrier: the group meets, the leaders trade, the group hears.
func interBarrier(ctx context.Context, c *fabric.Comm) error {
	err := Barrier(ctx, c.Local())
	out, in := withStatus(0, err), make([]byte, 8)
	xerr := across(ctx, c, out, in, leader(c))
	return handOut(ctx, c, in, first(err, xerr), "intercommunicator barrier")
}

// interBcast: the root sends to the other group's leader, which hands it
// out.
func interBcast(ctx context.Context, c *fabric.Comm, b []byte, root int) error {
	switch {
	case root == fabric.Root:
		out := withStatus(len(b), nil)
		copy(out[8:], b)
		return across(ctx, c, out, nil, 0)
	case root == fabric.ProcNull:
		across(ctx, c, nil, nil, -1) // (nothing of this member's can fail)
		return nil
	case root < 0 || root >= c.RemoteSize():
		return fmt.Errorf("%w: root %d of an intercommunicator's remote group of %d (or fabric.Root, fabric.ProcNull)", fabric.ErrRank, root, c.RemoteSize())
	}
	in := withStatus(len(b), nil)
	peer := -1
	if c.Rank() == 0 {
		peer = root
	}
	err := across(ctx, c, nil, in, peer)
	err = handOut(ctx, c, in, err, "intercommunicator bcast")
	copy(b, in[8:])
	return err
}

// interAllreduce: each group reduces to its leader; the leaders trade;
// each hands out the other group's result.
func interAllreduce[T any](ctx context.Context, c *fabric.Comm, send, recv []T, o op.Op[T]) error {
	if send == nil || len(send) != len(recv) {
		return countErr("an intercommunicator allreduce takes send and recv of one length (no in place), not %d and %d", len(send), len(recv))
	}
	part := make([]T, len(recv))
	err := Reduce(ctx, c.Local(), send, part, o, 0)
	out, in := withStatus(len(bytesOf(part)), err), withStatus(len(bytesOf(recv)), nil)
	copy(out[8:], bytesOf(part))
	xerr := across(ctx, c, out, in, leader(c))
	err = handOut(ctx, c, in, first(err, xerr), "intercommunicator allreduce")
	copy(bytesOf(recv), in[8:])
	return err
}

// interAllgather: each group gathers at its leader; the leaders trade;
// each hands out the other group's blocks.
func interAllgather[T any](ctx context.Context, c *fabric.Comm, send, recv []T) error {
	if send == nil || c.RemoteSize() == 0 || len(recv)%c.RemoteSize() != 0 {
		return countErr("an intercommunicator allgather takes send (no in place) and recv of a multiple of the remote group's %d blocks, not %d elements", c.RemoteSize(), len(recv))
	}
	all := make([]T, len(send)*c.Size())
	err := Gather(ctx, c.Local(), send, all, 0)
	out, in := withStatus(len(bytesOf(all)), err), withStatus(len(bytesOf(recv)), nil)
	copy(out[8:], bytesOf(all))
	xerr := across(ctx, c, out, in, leader(c))
	err = handOut(ctx, c, in, first(err, xerr), "intercommunicator allgather")
	copy(bytesOf(recv), in[8:])
	return err
}
