//go:build linux

package ft

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/op"
)

func init() { progs.Add("soak", progSoak) }

// soakFor is how long TestSoak keeps every rank busy.
const soakFor = 60 * time.Second

// progSoak: no false positive under load. For a minute, with the default
// settings and every rank's detector running, each rank alternates bursts
// of computation outside the library (up to half a second) with
// allreduces; two ranks share each CPU. Afterwards nobody is known failed.
func progSoak(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	d, err := Start(ctx, ep, Options{})
	must(err, "start")
	rng := rand.New(rand.NewPCG(uint64(w.Rank()), 7))
	x := uint64(1)
	in, out := []int64{1}, []int64{0}
	for t0 := time.Now(); ; {
		// Every rank decides together when to stop: rank 0's clock.
		stop, all := []int64{0}, []int64{0}
		if w.Rank() == 0 && time.Since(t0) > soakFor {
			stop[0] = 1
		}
		must(collectives.Allreduce(ctx, w, stop, all, op.Max[int64]()), "allreduce")
		if all[0] == 1 {
			break
		}
		for burst := time.Now(); time.Since(burst) < time.Duration(rng.IntN(500))*time.Millisecond; {
			for i := 0; i < 1<<16; i++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		must(collectives.Allreduce(ctx, w, in, out, op.Sum[int64]()), "allreduce")
		if out[0] != int64(w.Size()) {
			failf("allreduce: %d", out[0])
		}
	}
	d.Stop()
	if f := ep.Failed(); len(f) != 0 || x == 0 {
		failf("known failed after the soak: %v", f)
	}
	return nil
}

func TestSoak(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			jobtest.BoundJobOK(t, 4, append([]string{progs.Env + "=soak"}, way.env...)...)
		})
	}
}
