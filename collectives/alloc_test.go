//go:build linux

package collectives

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

func init() { progs.Add("allocs", progAllocs) }

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
		{"allreduce 8 B", func() error { return Allreduce(ctx, c, x, y, op.Sum[byte]()) }},
		{"allreduce 1 MiB", func() error { return Allreduce(ctx, c, big, bigy, op.Sum[byte]()) }},
		{"allgather 8 B", func() error { return Allgather(ctx, c, x, big[:8*c.Size()]) }},
		{"alltoall 8 B (pairwise)", func() error { return Alltoall(ctx, c, big[:8*c.Size()], bigy[:8*c.Size()]) }},
		{"alltoall 8 B (bruck)", func() error { return Alltoall(ctx, c, big[:8*c.Size()], bigy[:8*c.Size()]) }},
		{"reduce_scatter_block 8 B", func() error { return ReduceScatterBlock(ctx, c, big[:8*c.Size()], y, op.Sum[byte]()) }},
		{"scan 8 B", func() error { return Scan(ctx, c, x, y, op.Sum[byte]()) }},
		{"gather+scatter 8 B", func() error {
			if err := Gather(ctx, c, x, big[:8*c.Size()], 0); err != nil {
				return err
			}
			return Scatter(ctx, c, big[:8*c.Size()], y, 0)
		}},
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
		if strings.Contains(tc.name, "(bruck)") {
			Force("alltoall", Bruck)
		}
		t0 := time.Now()
		allocs := testing.AllocsPerRun(runs, func() {
			if e := tc.f(); e != nil && err == nil {
				err = e
			}
		})
		Force("alltoall", Auto)
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

func TestCollectiveAllocations(t *testing.T) { t.Log(runOK(t, 2, "allocs")) }
