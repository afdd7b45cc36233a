//go:build linux

package osu

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

// InitName and InitTitle name osu_init, OSU's start-up test: how long
// MPI_Init takes — here fabric.Init — in each process of the job.
const (
	InitName  = "osu_init"
	InitTitle = "OSU MPI Init Test"
)

// RunInit prints osu_init's line at rank 0 of c, as OSU 7.4 does: the
// number of processes, and the smallest, largest and mean time their
// fabric.Init took (took is this process's), in whole milliseconds,
// truncated as OSU's C does. Collective over c.
func RunInit(ctx context.Context, c *fabric.Comm, took time.Duration, out io.Writer) error {
	mine := []int64{took.Milliseconds()}
	lo, hi, sum := []int64{0}, []int64{0}, []int64{0}
	for _, r := range []struct {
		to []int64
		o  op.Op[int64]
	}{{lo, op.Min[int64]()}, {hi, op.Max[int64]()}, {sum, op.Sum[int64]()}} {
		if err := collectives.Reduce(ctx, c, mine, r.to, r.o, 0); err != nil {
			return err
		}
	}
	if c.Rank() == 0 {
		fmt.Fprintf(out, "# %s v%s\nnprocs: %d, min: %d ms, max: %d ms, avg: %d ms\n",
			InitTitle, Version, c.Size(), lo[0], hi[0], sum[0]/int64(c.Size()))
	}
	return nil
}
