//go:build linux

// Command ftskeleton is the whole of a fault-tolerant Rivet program, in
// the order its parts must come: join the job, start the failure
// detector, work, and on a failure revoke, agree and shrink, then go on
// with the survivors; stop the detector before the endpoint closes.
// Copy it and replace the work.
//
//	rivetrun -n 4 -ft -expect-failures go run ./examples/ftskeleton
//
// -ft keeps the job running when a rank dies (and tells the others);
// -expect-failures makes rivetrun's status the survivors'. Neither
// starts the detector: ft.Start does, in every rank.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/op"
)

func main() {
	// Every blocking call takes a context: bound the whole run.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	// 1. Join the job (rivetrun, mpiexec, srun, or alone).
	ep, err := fabric.Init(ctx)
	if err != nil {
		return err
	}
	defer ep.Close() // last: deferred calls run in reverse

	// 2. Start the failure detector: collective, every rank calls it.
	// Stop it before the endpoint closes — deferred after Close, it
	// runs before it.
	d, err := ft.Start(ctx, ep, ft.Options{})
	if err != nil {
		return err
	}
	defer d.Stop()

	// 3. Work on a communicator that recovery replaces. Its collectives
	// raise at every member or at none (each ends with an agreement), so
	// a step is done everywhere or redone everywhere; without the key a
	// collective may succeed at some survivors and fail at others, and
	// the survivors must agree (ft.Agree) on what was done.
	comm := ep.World()
	if err := comm.SetErrorUniform(fabric.UniformColl); err != nil {
		return err
	}
	sum := int64(0)
	for step := 1; step <= 10; step++ {
		inject.Point(ep.World().Rank(), fmt.Sprintf("step%d", step))
		out := []int64{0}
		err := collectives.Allreduce(ctx, comm, []int64{int64(step)}, out, op.Sum[int64]())
		if err == nil {
			sum += out[0]
			continue
		}
		// 4. A failure: any other error is a bug, not a failure.
		if !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
			return err
		}
		if comm, err = shrinkAfter(ctx, ep, comm); err != nil {
			return err
		}
		step-- // redo the step on the survivors
	}
	fmt.Printf("rank %d of %d survivors: sum %d\n", comm.Rank(), comm.Size(), sum)
	return nil
}

// shrinkAfter makes the survivors' communicator: revoke the failed one, so
// that no member still waits in it, and shrink it (Shrink agrees on who
// failed, so every survivor gets the same communicator).
func shrinkAfter(ctx context.Context, ep *fabric.Endpoint, comm *fabric.Comm) (*fabric.Comm, error) {
	comm.Revoke()
	s, err := ft.Shrink(ctx, comm)
	if err != nil {
		return nil, err
	}
	if comm != ep.World() {
		comm.Free()
	}
	return s, s.SetErrorUniform(fabric.UniformColl)
}
