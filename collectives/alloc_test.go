package collectives

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
)

func init() { progs["allocs"] = progAllocs }

// progAllocs: steady-state collectives allocate nothing — schedules,
// their scratch buffers and operations are reused.
func progAllocs(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	const runs = 2000
	x, y := make([]byte, 8), make([]byte, 8)
	big, bigy := make([]byte, 1<<20), make([]byte, 1<<20)
	for _, tc := range []struct {
		name string
		f    func() error
	}{
		{"barrier", func() error { return Barrier(ctx, c) }},
		{"allreduce 8 B", func() error { return Allreduce(ctx, c, x, y, Sum[byte]()) }},
		{"allreduce 1 MiB", func() error { return Allreduce(ctx, c, big, bigy, Sum[byte]()) }},
		// A root that runs ahead queues sends, and its pool of operations
		// grows to match: a barrier keeps the ranks in step.
		{"bcast 8 B + barrier", func() error {
			if err := Bcast(ctx, c, x, 0); err != nil {
				return err
			}
			return Barrier(ctx, c)
		}},
	} {
		var err error
		t0 := time.Now()
		allocs := testing.AllocsPerRun(runs, func() {
			if e := tc.f(); e != nil && err == nil {
				err = e
			}
		})
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Printf("%s: %v allocations, %.2f µs\n", tc.name, allocs, time.Since(t0).Seconds()*1e6/(runs+1))
		}
		if allocs != 0 {
			return fmt.Errorf("%s allocates %v times in steady state", tc.name, allocs)
		}
	}
	return nil
}

func TestCollectiveAllocations(t *testing.T) { t.Log(runOK(t, 2, "allocs", "RIVET_CPU=")) }
