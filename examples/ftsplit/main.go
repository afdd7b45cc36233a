//go:build linux

// Command ftsplit is MPI 4.1's Example 16.1, safe communicator creation:
// a split whose outcome every survivor agrees on. A process that failed
// can make Split raise at some members and succeed at others; an
// agreement on the outcome tells every member, and the members whose
// split succeeded free what they got. Then the job shrinks its world and
// splits again.
//
// Run it under a launcher, fault tolerant:
//
//	rivetrun -ft -np 6 go run ./examples/ftsplit
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/op"
)

// splitConsistent is Comm_split_consistent: Split, then an agreement on
// whether it succeeded everywhere.
func splitConsistent(ctx context.Context, parent *fabric.Comm, color, key int) (*fabric.Comm, error) {
	child, err := parent.Split(ctx, color, key)
	ok := 0
	if err == nil {
		ok = 1
	}
	flag, aerr := ft.Agree(ctx, parent, ok)
	if aerr == nil && flag == 1 {
		// Every survivor has its child communicator. It may hold a
		// process that failed since, but it is consistent.
		return child, nil
	}
	// Some member did not make it: the child is inconsistent.
	if err == nil && child != nil {
		child.Free()
	}
	if aerr == nil {
		aerr = fmt.Errorf("%w: the split failed at another member", fabric.ErrProcFailed)
	}
	return nil, aerr
}

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
	w := ep.World()
	me := w.Rank()
	inject.Point(me, "split")
	c := w
	child, err := splitConsistent(ctx, c, me%2, me)
	if errors.Is(err, fabric.ErrProcFailed) {
		fmt.Printf("split failed consistently (%v); shrinking\n", err)
		if c, err = ft.Shrink(ctx, w); err != nil {
			return err
		}
		defer c.Free()
		child, err = splitConsistent(ctx, c, me%2, me)
	}
	if err != nil {
		return err
	}
	defer child.Free()
	// Work on the child: the sum of its members' world ranks.
	sum := []int64{0}
	if err := collectives.Allreduce(ctx, child, []int64{int64(me)}, sum, op.Sum[int64]()); err != nil {
		return err
	}
	fmt.Printf("color %d: %d members, world ranks summing to %d\n", me%2, child.Size(), sum[0])
	return nil
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "ftsplit:", err)
		os.Exit(1)
	}
}
