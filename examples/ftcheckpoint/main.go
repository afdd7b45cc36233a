//go:build linux

// Command ftcheckpoint survives failures with checkpoints in files: every
// few steps the processes write their state collectively to a
// checkpoint file (package files), and agree that every one of them
// wrote it; when a process dies — between checkpoints or in the middle
// of one — the survivors revoke, shrink, agree on the last checkpoint
// every process completed, and restart from it, each reading its new,
// larger share of the state. The run ends with the result a run without
// failure has.
//
//	rivetrun -n 4 -ft -expect-failures go run ./examples/ftcheckpoint -dir /tmp/ckpt
//
// The state is an array of numbers, each updated every step on its own,
// so any number of processes computes the same thing: process r of n
// holds elements [r·N/n, (r+1)·N/n). A checkpoint is the array in its
// global order, written in two collective writes (the halves of each
// process's block); one that a failure interrupted is left on disk but
// never used, because its agreement says it is not complete.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/files"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/op"
)

const (
	elems = 1 << 14 // the array's length
	steps = 12
	every = 3 // steps between checkpoints
)

// dir holds the checkpoints (-dir, or FTCHECKPOINT_DIR).
var dir = os.Getenv("FTCHECKPOINT_DIR")

func main() {
	flag.StringVar(&dir, "dir", "ftcheckpoint.d", "the `directory` for the checkpoints, shared by every process")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

// update is element i's next value, at step s.
func update(x float64, s, i int) float64 {
	return math.Sin(x+0.01*float64(s*(i%13))) + 0.5*math.Cos(float64(i))
}

// share is rank r's part of the array among n processes.
func share(r, n int) (lo, hi int) { return r * elems / n, (r + 1) * elems / n }

func run(ctx context.Context) error {
	if dir == "" {
		dir = "ftcheckpoint.d"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ep, err := fabric.Init(ctx)
	if err != nil {
		return err
	}
	defer ep.Close()
	d, err := ft.Start(ctx, ep, ft.Options{})
	if err != nil {
		return err
	}
	defer d.Stop()
	comm := ep.World()
	me := comm.Rank() // world rank, for the kill points

	lo, hi := share(comm.Rank(), comm.Size())
	x := make([]float64, hi-lo)
	step, last := 0, 0 // the next step; the last complete checkpoint (0: none)
	for step < steps {
		inject.Point(me, fmt.Sprintf("step%d", step))
		err := advance(ctx, comm, x, lo, step)
		if err == nil {
			step++
			if step%every == 0 {
				if err = checkpoint(ctx, comm, x, lo, step, me); err == nil {
					last = step
				}
			}
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
			return err
		}
		// Recover: shrink, and restart from the last checkpoint.
		for {
			comm.Revoke()
			s, err := ft.Shrink(ctx, comm)
			if err != nil {
				return err
			}
			comm = s
			lo, hi = share(comm.Rank(), comm.Size())
			x = make([]float64, hi-lo)
			err = restore(ctx, comm, x, lo, last)
			if flag, aerr := ft.Agree(ctx, comm, ok(err)); aerr == nil && flag == 1 {
				break
			}
		}
		step = last
		fmt.Printf("rank %d: %d processes go on from step %d\n", me, comm.Size(), step)
	}

	// The result: a sum of the numbers' bits, the same whatever the
	// decomposition (integer addition is associative).
	var sum uint64
	for i, v := range x {
		if v != reference(lo+i) {
			return fmt.Errorf("element %d is %v, not the failure-free run's %v", lo+i, v, reference(lo+i))
		}
		sum += math.Float64bits(v)
	}
	total := []uint64{0}
	if err := collectives.Allreduce(ctx, comm, []uint64{sum}, total, op.Sum[uint64]()); err != nil {
		return err
	}
	fmt.Printf("world rank %d: %d of %d: checksum %#x\n", me, comm.Rank(), comm.Size(), total[0])
	return nil
}

func ok(err error) int {
	if err == nil {
		return 1
	}
	return 0
}

// advance does step s on this process's elements; it counts once every
// process agreed it finished.
func advance(ctx context.Context, c *fabric.Comm, x []float64, lo, s int) error {
	for i := range x {
		x[i] = update(x[i], s, lo+i)
	}
	// Some communication every step, as a real code has (a norm).
	var local float64
	for _, v := range x {
		local += v * v
	}
	norm := []float64{0}
	err := collectives.Allreduce(ctx, c, []float64{local}, norm, op.Sum[float64]())
	flag, aerr := ft.Agree(ctx, c, ok(err))
	switch {
	case aerr != nil:
		return aerr
	case flag == 0:
		return fmt.Errorf("%w: step %d did not finish everywhere", fabric.ErrProcFailed, s)
	}
	return nil
}

func path(step int) string { return filepath.Join(dir, fmt.Sprintf("ckpt-%03d", step)) }

// checkpoint writes the array as of step to its file, collectively, and
// returns nil once every process agreed that all of it is there. A
// collective write may succeed here and fail elsewhere (MPI 4.1
// §16.2.6): the agreement is what makes a checkpoint complete.
func checkpoint(ctx context.Context, c *fabric.Comm, x []float64, lo, step, me int) error {
	err := func() error {
		f, err := files.Open(ctx, c, path(step), files.ModeCreate|files.ModeWrOnly, files.Hints{})
		if err != nil {
			return err
		}
		err = f.SetView(ctx, 0, 8, files.Contiguous())
		half := len(x) / 2
		for k, part := range [][]float64{x[:half], x[half:]} {
			if err != nil {
				break
			}
			if k == 1 {
				inject.Point(me, fmt.Sprintf("ckpt%d", step)) // half written
			}
			_, err = f.WriteAtAll(ctx, int64(lo+k*half), files.Bytes(part))
		}
		if err == nil {
			err = f.Sync(ctx)
		}
		return errors.Join(err, f.Close(ctx))
	}()
	flag, aerr := ft.Agree(ctx, c, ok(err))
	switch {
	case aerr != nil:
		return aerr
	case flag == 0:
		return fmt.Errorf("%w: checkpoint %d is not complete (%v)", fabric.ErrProcFailed, step, err)
	}
	return nil
}

// restore reads this process's share of the checkpoint of step (the
// initial state if step is 0).
func restore(ctx context.Context, c *fabric.Comm, x []float64, lo, step int) error {
	if step == 0 {
		clear(x)
		return nil
	}
	f, err := files.Open(ctx, c, path(step), files.ModeRdOnly, files.Hints{})
	if err != nil {
		return err
	}
	err = f.SetView(ctx, 0, 8, files.Contiguous())
	if err == nil {
		_, err = f.ReadAtAll(ctx, int64(lo), files.Bytes(x))
	}
	return errors.Join(err, f.Close(ctx))
}

// reference is element i after every step, computed alone.
func reference(i int) float64 {
	v := 0.0
	for s := range steps {
		v = update(v, s, i)
	}
	return v
}
