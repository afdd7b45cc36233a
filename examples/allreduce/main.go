//go:build linux

// Allreduce is the smallest complete Rivet program: it joins the job it
// was started in, passes a token around a ring of point-to-point
// messages, sums a vector over every process and checks the result.
//
//	go run ./cmd/rivetrun -n 4 go run ./examples/allreduce
//	mpiexec.hydra -n 4 ./allreduce        # the same binary under MPICH's launcher
//	go run ./examples/allreduce           # alone: a job of one
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	ep, err := fabric.Init(ctx)
	if err != nil {
		return err
	}
	defer ep.Close()
	w := ep.World()
	me, n := w.Rank(), w.Size()

	// A token goes once around the ring, each rank adding its rank.
	token := make([]int64, 1)
	if n > 1 {
		next, prev := (me+1)%n, (me+n-1)%n
		if me == 0 {
			if err := fabric.SendSlice(ctx, w, token, next, 0); err != nil {
				return err
			}
			if _, err := fabric.RecvSlice(ctx, w, token, prev, 0); err != nil {
				return err
			}
		} else {
			if _, err := fabric.RecvSlice(ctx, w, token, prev, 0); err != nil {
				return err
			}
			token[0] += int64(me)
			if err := fabric.SendSlice(ctx, w, token, next, 0); err != nil {
				return err
			}
		}
	}

	// Every rank contributes [rank, 1, rank²]; everyone gets the sums.
	x := []float64{float64(me), 1, float64(me * me)}
	sum := make([]float64, len(x))
	if err := collectives.Allreduce(ctx, w, x, sum, op.Sum[float64]()); err != nil {
		return err
	}
	want := []float64{float64(n * (n - 1) / 2), float64(n), float64((n - 1) * n * (2*n - 1) / 6)}
	for i := range sum {
		if sum[i] != want[i] {
			return fmt.Errorf("rank %d: sum %v, want %v", me, sum, want)
		}
	}
	if me == 0 {
		fmt.Fprintf(os.Stdout, "%d ranks via %s: token %d, sums %v\n", n, ep.Launcher(), token[0], sum)
	}
	return collectives.Barrier(ctx, w)
}
