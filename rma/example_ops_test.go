//go:build linux

package rma_test

import (
	"context"
	"fmt"
	"log"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
	"github.com/rivet-hpc/rivet/rma"
)

// A work counter in rank 0's memory that every process draws from with
// fetch-and-add, in a passive-target epoch (here, a job of one).
func ExampleFetchAndOp() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()

	w, err := rma.Allocate(ctx, ep.World(), 8, 8, rma.Info{}) // one int64 per process
	if err != nil {
		log.Fatal(err)
	}
	defer w.Free(ctx)
	if err := w.LockAll(ctx, 0); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		task, err := rma.FetchAndOp(ctx, w, int64(1), 0, 0, op.Sum[int64]())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("task", task)
	}
	if err := w.UnlockAll(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// task 0
	// task 1
	// task 2
}

// Put a halo into the neighbour's window between two fences (here the
// process is its own neighbour).
func ExamplePut() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	c := ep.World()

	w, err := rma.Allocate(ctx, c, 4*8, 8, rma.Info{})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Free(ctx)
	next := (c.Rank() + 1) % c.Size()
	if err := w.Fence(ctx, 0); err != nil {
		log.Fatal(err)
	}
	if err := rma.Put(ctx, w, []float64{1.5, 2.5}, next, 2); err != nil {
		log.Fatal(err)
	}
	if err := w.Fence(ctx, 0); err != nil {
		log.Fatal(err)
	}
	mem, err := rma.View[float64](w)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(mem)
	// Output: [0 0 1.5 2.5]
}
