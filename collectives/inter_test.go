//go:build linux

package collectives

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/op"
)

func init() { progs.Add("inter", progInter) }

var (
	must  = jobtest.Must
	failf = jobtest.Failf
)

// evenOdd makes the intercommunicator of the even world ranks (group 0)
// and the odd ones (group 1).
func evenOdd(ctx context.Context, w *fabric.Comm) (*fabric.Comm, *fabric.Comm, int) {
	color := w.Rank() % 2
	local, err := w.Split(ctx, color, w.Rank())
	must(err, "split")
	ic, err := local.IntercommCreate(ctx, 0, w, 1-color, 9)
	must(err, "intercomm create")
	return local, ic, color
}

// progInter: Barrier, Bcast (from each group, every root), Allreduce and
// Allgather across the even and odd world ranks give each group the
// other's data; the other collectives are refused.
func progInter(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me := w.Rank()
	local, ic, color := evenOdd(ctx, w)
	theirs := ic.RemoteGroup().Members()
	for range 3 {
		must(Barrier(ctx, ic), "barrier")
	}
	// Bcast: every rank of each group is the root once.
	for g := range 2 {
		size := ic.Size()
		if g != color {
			size = ic.RemoteSize()
		}
		for root := range size {
			buf := []int64{-1, -1, -1}
			r := fabric.ProcNull
			switch {
			case g == color && root == ic.Rank():
				r, buf = fabric.Root, []int64{int64(me), int64(me) * 10, 7}
			case g != color:
				r = root
			}
			must(Bcast(ctx, ic, buf, r), "bcast")
			if g != color {
				if want := []int64{int64(theirs[root]), int64(theirs[root]) * 10, 7}; !slices.Equal(buf, want) {
					failf("bcast from remote rank %d: %v, want %v", root, buf, want)
				}
			}
		}
	}
	// Allreduce: the other group's world ranks, summed.
	sum := []int64{0, 0}
	must(Allreduce(ctx, ic, []int64{int64(me), 1}, sum, op.Sum[int64]()), "allreduce")
	var want int64
	for _, r := range theirs {
		want += int64(r)
	}
	if sum[0] != want || sum[1] != int64(len(theirs)) {
		failf("allreduce: %v, want [%d %d]", sum, want, len(theirs))
	}
	// Allgather: the other group's world ranks, in their order.
	got := make([]int32, 2*ic.RemoteSize())
	must(Allgather(ctx, ic, []int32{int32(me), int32(-me)}, got), "allgather")
	for i, r := range theirs {
		if got[2*i] != int32(r) || got[2*i+1] != int32(-r) {
			failf("allgather: %v from %v", got, theirs)
		}
	}
	// Refused, not misread.
	if err := Reduce(ctx, ic, []int64{1}, []int64{0}, op.Sum[int64](), 0); !errors.Is(err, fabric.ErrComm) {
		failf("Reduce on an intercommunicator: %v", err)
	}
	if _, err := Ibarrier(ic); !errors.Is(err, fabric.ErrComm) {
		failf("Ibarrier on an intercommunicator: %v", err)
	}
	if err := Allreduce(ctx, ic, nil, sum, op.Sum[int64]()); !errors.Is(err, ErrCount) {
		failf("in-place Allreduce on an intercommunicator: %v", err)
	}
	if err := Bcast(ctx, ic, sum, ic.RemoteSize()); !errors.Is(err, fabric.ErrRank) {
		failf("Bcast from remote rank %d of %d: %v", ic.RemoteSize(), ic.RemoteSize(), err)
	}
	must(ic.Free(), "free")
	return local.Free()
}

func TestIntercommCollectives(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { runOK(t, n, "inter") })
	}
}

func TestIntercommCollectivesOverVerbs(t *testing.T) {
	devs := testutil.RXEDevices(t)
	runOK(t, 5, "inter", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+strings.Join(devs, ","))
}
