//go:build linux

package rma

import (
	"context"
	"errors"
	"testing"

	"github.com/rivet-hpc/rivet/fabric"
	_ "github.com/rivet-hpc/rivet/ft" // the agreement mpi_error_uniform uses
)

func init() { progs.Add("uniformcreate", progUniformCreate) }

// TestUniformCreate: on a communicator whose error uniformity is
// UniformCreate, a window creation whose part fails at one member after
// every exchange — as when a member learns of a failure at the last
// moment, while the others already had all they needed and returned —
// raises at every member, and the members whose part succeeded release
// it: the next creation succeeds everywhere, and a put through it
// arrives. (Before creations honoured the key, the other members
// returned a window rank 1 did not have: an example that summed into it
// left rank 1 out and the job waiting.)
func TestUniformCreate(t *testing.T) {
	for _, p := range providers(t, []int{4}) {
		t.Run(p.name, func(t *testing.T) { runOK(t, 4, "uniformcreate", p.env...) })
	}
}

var errLastMoment = errors.New("rma test: a failure learned at the last moment")

func progUniformCreate(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	must(c.SetErrorUniform(fabric.UniformCreate), "set uniformity create")
	for _, flavor := range []string{"allocate", "dynamic"} {
		testHookBuilt = func(*Window) error {
			if me == 1 {
				return errLastMoment
			}
			return nil
		}
		var w *Window
		var err error
		if flavor == "allocate" {
			w, err = Allocate(ctx, c, 64, 8, Info{})
		} else {
			w, err = CreateDynamic(ctx, c, Info{})
		}
		testHookBuilt = nil
		switch {
		case w != nil || err == nil:
			failf("%s creation succeeded (window %v, error %v); want it to raise, as rank 1's part failed", flavor, w != nil, err)
		case me == 1 && !errors.Is(err, errLastMoment):
			failf("%s creation raised %v, want its own failure", flavor, err)
		case me != 1 && !errors.Is(err, fabric.ErrProcFailed):
			failf("%s creation raised %v, want ErrProcFailed (it failed at another member)", flavor, err)
		}
	}
	// Every member released its part: the next window is whole.
	w, err := Allocate(ctx, c, 64, 8, Info{})
	must(err, "allocate after the failed creations")
	must(w.Fence(ctx, 0), "fence")
	must(Put(ctx, w, []int64{int64(100 + me)}, (me+1)%n, 0), "put")
	must(w.Fence(ctx, 0), "fence")
	got, err := View[int64](w)
	must(err, "view")
	if want := int64(100 + (me+n-1)%n); got[0] != want {
		failf("word 0 holds %d, want %d", got[0], want)
	}
	must(w.Free(ctx), "free")
	return nil
}
