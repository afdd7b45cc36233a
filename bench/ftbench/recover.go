//go:build linux

package ftbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/op"
)

// A step is one operation Recover times: pre and post (if any) run
// around each timed run, untimed.
type step struct {
	name           string
	pre, run, post func() error
}

// RecoverOptions shape Recover's run.
type RecoverOptions struct {
	Iters  int // timed iterations of each operation (default 1000)
	Warmup int // untimed ones first
	// Failure adds a row timed after a real failure: the last rank kills
	// itself (SIGKILL) once the other rows are done, and the others time
	// Shrink of the communicator it was in. The job must tolerate the
	// failure (rivetrun -ft; rivet bench -np sets it).
	Failure bool
}

// Recover times, in one run over w, the operations a job recovering from
// a failure is made of beside the failure-free operations they are
// measured against, and prints one row per operation as OSU's collective
// tests print theirs with -f: the average over ranks of each rank's mean
// time, the smallest and the largest (µs), and the iterations.
//
//   - barrier, allreduce of 4 bytes and Dup (then Free) over w;
//   - agree and iagree (ft.Agree, ft.IAgree then Wait) over w;
//   - shrink (ft.Shrink, then Free) over w, nobody failed;
//   - revoke: rank 0 revokes a communicator on which every other rank
//     waits in a receive; each rank's time runs from the barrier before
//     to its receive raising fabric.ErrRevoked (rank 0: to Revoke's
//     return). The largest is when the last rank knew;
//   - with Failure, shrink (1 failed): Shrink over w once its last rank
//     has died and every other knows.
//
// Every iteration starts from a barrier; making and freeing the
// communicator to revoke is not timed.
func Recover(ctx context.Context, w *fabric.Comm, o RecoverOptions, out io.Writer) error {
	if o.Iters <= 0 {
		o.Iters = 1000
	}
	if o.Warmup < 0 || w.Size() < 2 || o.Failure && w.Size() < 3 {
		return fmt.Errorf("ftbench: warmup %d, %d ranks (at least 2; 3 with a failure): %w", o.Warmup, w.Size(), fabric.ErrInvalid)
	}
	one := []int32{1}
	sum := make([]int32, 1)
	var c *fabric.Comm
	shrink := func() error {
		s, err := ft.Shrink(ctx, w)
		if err == nil {
			err = s.Free()
		}
		return err
	}
	rows := []step{
		{name: "barrier", run: func() error { return collectives.Barrier(ctx, w) }},
		{name: "allreduce (4 B)", run: func() error { return collectives.Allreduce(ctx, w, one, sum, op.Sum[int32]()) }},
		{name: "comm dup", run: func() error {
			c, err := w.Dup(ctx)
			if err == nil {
				err = c.Free()
			}
			return err
		}},
		{name: "agree", run: func() error {
			_, err := ft.Agree(ctx, w, 1)
			return err
		}},
		{name: "iagree", run: func() error {
			r, err := ft.IAgree(w, 1)
			if err == nil {
				_, err = r.Wait(ctx)
			}
			return err
		}},
		{name: "shrink", run: shrink},
		{name: "revoke",
			pre: func() (err error) {
				c, err = w.Dup(ctx)
				return err
			},
			run: func() error {
				if w.Rank() == 0 {
					return c.Revoke()
				}
				if _, err := c.Recv(ctx, nil, 0, 1); !errors.Is(err, fabric.ErrRevoked) {
					return fmt.Errorf("ftbench: a receive on a revoked communicator: %v", err)
				}
				return nil
			},
			post: func() error { return c.Free() }},
	}
	if w.Rank() == 0 {
		fmt.Fprintf(out, "# Rivet Fault-Tolerance Recovery Test: %d ranks\n", w.Size())
		fmt.Fprintf(out, "%-20s%18s%18s%18s%12s\n", "# Operation", "Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Iterations")
	}
	if err := timeRows(ctx, w, rows, o, out); err != nil || !o.Failure {
		return err
	}
	ep, last := w.Endpoint(), w.Size()-1
	lastWorld, err := w.Group().WorldRank(last)
	if err != nil {
		return err
	}
	if w.Rank() == last {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	for ep.State(lastWorld) != fabric.Failed {
		t0 := time.Now()
		if err := w.WaitFT(ctx, func() bool { return time.Since(t0) > time.Millisecond }); err != nil {
			return err
		}
	}
	// The survivors' communicator, for the barriers and the statistics.
	s, err := ft.Shrink(ctx, w)
	if err != nil {
		return err
	}
	defer s.Free()
	return timeRows(ctx, s, []step{{name: "shrink (1 failed)", run: shrink}}, o, out)
}

// timeRows times each row over base (its barriers and statistics) and
// prints it from base's rank 0.
func timeRows(ctx context.Context, base *fabric.Comm, rows []step, o RecoverOptions, out io.Writer) error {
	for _, row := range rows {
		var total time.Duration
		for i := 0; i < o.Warmup+o.Iters; i++ {
			if row.pre != nil {
				if err := row.pre(); err != nil {
					return fmt.Errorf("ftbench: %s: %w", row.name, err)
				}
			}
			if err := collectives.Barrier(ctx, base); err != nil {
				return err
			}
			t0 := time.Now()
			if err := row.run(); err != nil {
				return fmt.Errorf("ftbench: %s: %w", row.name, err)
			}
			if i >= o.Warmup {
				total += time.Since(t0)
			}
			if row.post != nil {
				if err := row.post(); err != nil {
					return fmt.Errorf("ftbench: %s: %w", row.name, err)
				}
			}
		}
		mean := []float64{float64(total.Nanoseconds()) / 1e3 / float64(o.Iters)}
		lo, hi, avg := make([]float64, 1), make([]float64, 1), make([]float64, 1)
		for _, r := range []struct {
			dst []float64
			o   op.Op[float64]
		}{{lo, op.Min[float64]()}, {hi, op.Max[float64]()}, {avg, op.Sum[float64]()}} {
			if err := collectives.Allreduce(ctx, base, mean, r.dst, r.o); err != nil {
				return err
			}
		}
		if base.Rank() == 0 {
			fmt.Fprintf(out, "%-20s%18.2f%18.2f%18.2f%12d\n", row.name, avg[0]/float64(base.Size()), lo[0], hi[0], o.Iters)
		}
	}
	return nil
}
