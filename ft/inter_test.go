//go:build linux

package ft

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

func init() { progs.Add("inter", progInter) }

// interVictims are killed one after the other in progInter: a member of
// the even group, then the odd group's leader.
var interVictims = []int{2, 1}

// andBits is the AND over world ranks ws of ^(1<<w): what the members of ws
// agree on when each contributes ^(1 << its world rank).
func andBits(ws []int) int {
	v := -1
	for _, w := range ws {
		v &^= 1 << w
	}
	return v
}

// without is ws without the world ranks in dead.
func without(ws []int, dead ...int) []int {
	return slices.DeleteFunc(slices.Clone(ws), func(w int) bool { return slices.Contains(dead, w) })
}

// progInter: the even and odd world ranks of 6 make an intercommunicator,
// the recovery pattern runs on it twice, with a process of each group
// killed: a survivor revokes it; an agreement raises ErrProcFailed at
// every survivor, in both groups, until they acknowledge the failure, and
// then answers the AND over the remote group's flags; IShrink makes the
// intercommunicator of the survivors, whose collectives work; after the
// second failure (the odd group's leader) Shrink shrinks again, without a
// revoke, and Merge makes one intracommunicator of every survivor (the
// case that breaks in Open MPI), with an agreement and an allreduce on it.
func progInter(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	defer startDetector(ctx, ep)()
	color := me % 2
	local, err := w.Split(ctx, color, me)
	must(err, "split")
	ic, err := local.IntercommCreate(ctx, 0, w, 1-color, 3)
	must(err, "intercomm create")
	groups := [2][]int{}
	for r := range n {
		groups[r%2] = append(groups[r%2], r)
	}
	alive := allOf(n)
	var dead []int
	for round, v := range interVictims {
		dieWhenReady(ctx, w, v, alive)
		dead = append(dead, v)
		alive = without(alive, v)
		awaitFailed(ctx, w, v)
		mine, theirs := without(groups[color], dead...), without(groups[1-color], dead...)
		if round == 0 {
			// A survivor of the other group revokes; a receive that never
			// matches ends everywhere.
			if me == 1 {
				must(ic.Revoke(), "revoke")
			} else if _, err := ic.Recv(ctx, make([]byte, 1), 0, 99); !errors.Is(err, fabric.ErrRevoked) && !isFailed(err, v) {
				failf("receive on the intercommunicator: %v, want ErrRevoked", err)
			}
			// Unacknowledged, the failure raises at every survivor.
			if _, err := Agree(ctx, ic, ^(1 << me)); !errors.Is(err, fabric.ErrProcFailed) {
				failf("agreement with an unacknowledged failure: %v", err)
			}
		}
		if g := ic.GetFailed(); !slices.Contains(g.Members(), v) {
			failf("round %d: GetFailed %v misses world rank %d", round, g.Members(), v)
		}
		ic.AckFailed(ic.Size() + ic.RemoteSize())
		flag, err := Agree(ctx, ic, ^(1 << me))
		must(err, "agreement after the acknowledgement")
		if flag != andBits(theirs) {
			failf("round %d: agreed %b, want the remote group's AND %b", round, flag, andBits(theirs))
		}
		// IAgree answers the same.
		r, err := IAgreeOp(ic, me, Max)
		must(err, "iagree")
		if got, err := r.Wait(ctx); err != nil || got != slices.Max(theirs) {
			failf("iagree max: %d, %v; want %d", got, err, slices.Max(theirs))
		}
		// The first round shrinks with IShrink, the second with Shrink.
		var next *fabric.Comm
		if round == 0 {
			r, err := IShrink(ic)
			must(err, "ishrink")
			next, err = r.Wait(ctx)
			must(err, "ishrink's wait")
		} else {
			next, err = Shrink(ctx, ic)
			must(err, "shrink")
		}
		if !next.IsInter() || !slices.Equal(next.Group().Members(), mine) || !slices.Equal(next.RemoteGroup().Members(), theirs) {
			failf("round %d: shrunk to %v and %v, want %v and %v", round, next.Group().Members(), next.RemoteGroup().Members(), mine, theirs)
		}
		must(ic.Free(), "free")
		ic = next
		sum := []int64{0}
		must(collectives.Allreduce(ctx, ic, []int64{int64(me)}, sum, op.Sum[int64]()), "allreduce")
		if want := sumOf(theirs); sum[0] != want {
			failf("round %d: the remote group's sum %d, want %d", round, sum[0], want)
		}
		must(collectives.Barrier(ctx, ic), "barrier")
	}
	m, err := ic.Merge(ctx, color == 1)
	must(err, "merge")
	want := slices.Concat(without(groups[0], dead...), without(groups[1], dead...))
	if !slices.Equal(m.Group().Members(), want) {
		failf("merged %v, want %v", m.Group().Members(), want)
	}
	flag, err := Agree(ctx, m, ^(1 << me))
	must(err, "agreement on the merged communicator")
	if flag != andBits(want) {
		failf("merged agreement %b, want %b", flag, andBits(want))
	}
	sum := []int64{0}
	must(collectives.Allreduce(ctx, m, []int64{int64(me)}, sum, op.Sum[int64]()), "allreduce on the merged communicator")
	if sum[0] != sumOf(want) {
		failf("merged sum %d, want %d", sum[0], sumOf(want))
	}
	must(m.Free(), "free the merged communicator")
	must(ic.Free(), "free")
	return local.Free()
}

func allOf(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

func sumOf(ws []int) int64 {
	var s int64
	for _, w := range ws {
		s += int64(w)
	}
	return s
}

// TestIntercommRecovery runs progInter over shared memory (host) and
// verbs (VM).
func TestIntercommRecovery(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			const n = 6
			out, errs, st := progs.Run(t, n, "inter", true, way.env...)
			if st != 128+9 {
				t.Fatalf("status %d, want 137 (the victims killed)\n%s\n%s", st, out, errs)
			}
			for r := range n {
				if !slices.Contains(interVictims, r) && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
				}
			}
		})
	}
}
