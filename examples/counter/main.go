//go:build linux

// Counter shows one-sided communication in both styles. First a shared
// work counter: every rank takes task numbers with FetchAndOp on a
// counter that rank 0 exposes, and adds each task's result into rank 0's
// total with Accumulate — passive target, so rank 0 takes no part beyond
// its own share of the work; the first rank to find the counter spent
// claims the report with CompareAndSwap. Then a halo exchange with
// Fence: each rank puts its edge values into its neighbours' halo cells.
// Each rank reads its own window through rma.View, a typed slice.
//
//	go run ./cmd/rivetrun -n 4 go run ./examples/counter
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
	"github.com/rivet-hpc/rivet/rma"
)

const tasks = 1000

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
	c := ep.World()
	me, n := c.Rank(), c.Size()

	// Rank 0's window holds the next task number, the total and the
	// rank (plus one) that claimed the report, as three int64s
	// (displacement unit 8).
	win, err := rma.Allocate(ctx, c, 24, 8, rma.Info{})
	if err != nil {
		return err
	}
	if err := win.LockAll(ctx, 0); err != nil {
		return err
	}
	done := 0
	for {
		task, err := rma.FetchAndOp(ctx, win, 1, 0, 0, op.Sum[int64]())
		if err != nil {
			return err
		}
		if task >= tasks {
			// Claim the report if nobody has: old 0, new me+1, in
			// sync/atomic's order; the previous value says who won.
			if _, err := rma.CompareAndSwap(ctx, win, int64(0), int64(me+1), 0, 2); err != nil {
				return err
			}
			break
		}
		if err := rma.Accumulate(ctx, win, []int64{task * task}, 0, 1, op.Sum[int64]()); err != nil {
			return err
		}
		done++
	}
	if err := win.UnlockAll(ctx); err != nil {
		return err
	}
	counts := make([]int64, n)
	if err := collectives.Allgather(ctx, c, []int64{int64(done)}, counts); err != nil {
		return err
	}
	if me == 0 {
		words, err := rma.View[int64](win) // this rank's window, typed
		if err != nil {
			return err
		}
		total, claimed := words[1], words[2]
		if want := int64((tasks - 1) * tasks * (2*tasks - 1) / 6); total != want {
			return fmt.Errorf("total %d, want %d", total, want)
		}
		if claimed < 1 || claimed > int64(n) {
			return fmt.Errorf("the report was claimed by %d, not a rank plus one", claimed)
		}
		fmt.Printf("%d tasks over %d ranks %v: sum of squares %d, reported by rank %d\n", tasks, n, counts, total, claimed-1)
	}
	if err := win.Free(ctx); err != nil {
		return err
	}

	// Halo exchange: cells [1, 8] are this rank's, 0 and 9 the halo.
	halo, err := rma.Allocate(ctx, c, 10*8, 8, rma.Info{})
	if err != nil {
		return err
	}
	cells, err := rma.View[float64](halo)
	if err != nil {
		return err
	}
	for i := 1; i <= 8; i++ {
		cells[i] = float64(me*100 + i)
	}
	left, right := (me+n-1)%n, (me+1)%n
	if err := halo.Fence(ctx, rma.NoPrecede); err != nil {
		return err
	}
	if err := rma.Put(ctx, halo, cells[1:2], left, 9); err != nil {
		return err
	}
	if err := rma.Put(ctx, halo, cells[8:9], right, 0); err != nil {
		return err
	}
	if err := halo.Fence(ctx, rma.NoSucceed); err != nil {
		return err
	}
	if cells[0] != float64(left*100+8) || cells[9] != float64(right*100+1) {
		return fmt.Errorf("rank %d: halo %v %v", me, cells[0], cells[9])
	}
	if me == 0 {
		fmt.Printf("halo of rank 0: %v | %v | %v\n", cells[0], cells[1:9], cells[9])
	}
	return halo.Free(ctx)
}
