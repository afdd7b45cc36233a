//go:build linux

package collectives_test

import (
	"context"
	"fmt"
	"log"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

// Sum a vector over every process of the job (here, a job of one).
func ExampleAllreduce() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()

	x := []float64{1, 2, 3}
	sum := make([]float64, len(x))
	if err := collectives.Allreduce(ctx, ep.World(), x, sum, op.Sum[float64]()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(sum)
	// Output: [1 2 3]
}

// Find where the smallest value is, and start a collective without
// waiting for it.
func ExampleMinLoc() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	w := ep.World()

	mine := []op.Loc[float64]{{Value: 0.25, Index: int32(w.Rank())}}
	best := make([]op.Loc[float64], 1)
	req, err := collectives.Iallreduce(w, mine, best, op.MinLoc[float64]())
	if err != nil {
		log.Fatal(err)
	}
	// … other work …
	if _, err := req.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.2f at rank %d\n", best[0].Value, best[0].Index)
	// Output: 0.25 at rank 0
}
