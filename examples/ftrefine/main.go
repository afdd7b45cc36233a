//go:build linux

// Command ftrefine is MPI 4.1's Example 16.5, fault-tolerant iterative
// refinement: each iteration ends with an allreduce of the local norms;
// a process that sees it fail revokes the communicator, so that no other
// waits in the next allreduce for it, and everyone agrees on whether all
// succeeded; if not, they shrink and go on with the survivors — one more
// iteration at least, for a correct answer.
//
//	rivetrun -ft -np 6 go run ./examples/ftrefine
package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/op"
)

const epsilon = 1e-6

func run(ctx context.Context) error {
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
	me := comm.Rank()
	// The "solution": each process halves its error per iteration.
	lnorm := float64(1 + me)
	gnorm := math.Inf(1)
	iter, recoveries := 0, 0
	for gnorm > epsilon {
		iter++
		inject.Point(me, fmt.Sprintf("iter%d", iter))
		lnorm /= 2
		out := []float64{0}
		err := collectives.Allreduce(ctx, comm, []float64{lnorm}, out, op.Max[float64]())
		gnorm = out[0]
		if err == nil && gnorm > epsilon {
			continue
		}
		if err != nil && !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
			return err
		}
		if errors.Is(err, fabric.ErrProcFailed) {
			// Others may be in the next allreduce already: interrupt them.
			comm.Revoke()
		}
		// About to leave (or recover): did everybody get the same?
		ok := 0
		if err == nil {
			ok = 1
		}
		flag, aerr := ft.Agree(ctx, comm, ok)
		if aerr != nil && !errors.Is(aerr, fabric.ErrProcFailed) {
			return aerr
		}
		if aerr != nil || flag == 0 {
			s, err := ft.Shrink(ctx, comm)
			if err != nil {
				return err
			}
			if comm != ep.World() {
				comm.Free() // the revoked communicator
			}
			comm = s
			recoveries++
			gnorm = epsilon + 1 // one more iteration at least
		}
	}
	fmt.Printf("converged at iteration %d on %d processes after %d recoveries: norm %.3g\n", iter, comm.Size(), recoveries, gnorm)
	if comm != ep.World() {
		comm.Free()
	}
	return nil
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "ftrefine:", err)
		os.Exit(1)
	}
}
