//go:build linux

// Command ftarray is a distributed array that survives losing a process
// in the middle of a one-sided epoch, and repairs only the memory the
// failure made undefined.
//
// The array holds N sums, X[i] = Σ f(r, i) over the processes r; each
// process owns a block of it in a window, and every process adds its
// terms into every block with Accumulate, under LockAll — the owners take
// no part. A process that dies part way leaves the blocks it had reached
// half-summed, and nobody can tell which elements hold its terms. Rivet's
// range records can: each owner reads Undefined().Exposed, the ranges of
// its block the dead process was writing, recomputes only those elements
// over the survivors, and keeps the rest. Then the survivors shrink, make
// a window over the new communicator, move the blocks to their new
// owners, recompute the dead process's own block (lost with it), and
// check every element. The answer is the sum over the survivors. The
// window's creation is uniform (fabric.UniformCreate): a process that
// dies before it leaves every survivor without a window, and each
// recomputes its whole block.
//
//	rivetrun -ft -np 4 go run ./examples/ftarray
//	FT_EXAMPLE_KILL=2:accumulated rivetrun -ft -np 4 go run ./examples/ftarray
//	FT_EXAMPLE_KILL=2:start rivetrun -ft -np 4 go run ./examples/ftarray
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/op"
	"github.com/rivet-hpc/rivet/rma"
)

// block is how many elements each process owns at the start.
const block = 16

// f is process r's term of element i: any pure function would do, as
// long as every process can recompute it.
func f(r, i int) int64 { return int64(r+1)*1000 + int64(i) }

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
	world := ep.World()
	me, n := world.Rank(), world.Size()
	total := n * block

	// Phase 1: every process adds its terms into every block, starting
	// with its right neighbour's.
	//
	// A creation, like any collective, may raise at one process and
	// succeed at another that had all it needed: a process that died
	// right after its own Allocate returned can make a slower one's
	// raise. Then the others would sum into a window that process does
	// not have. Uniform creation rules that out: Allocate succeeds
	// everywhere or raises everywhere.
	if err := world.SetErrorUniform(fabric.UniformCreate); err != nil {
		return err
	}
	inject.Point(me, "start") // dies before the window exists
	win, err := rma.Allocate(ctx, world, 8*block, 8, rma.Info{})
	if err != nil && !errors.Is(err, fabric.ErrProcFailed) {
		return err
	}
	ok := 0
	if err == nil {
		ok, err = sum(ctx, win, me, n)
		if err != nil {
			return err
		}
	}
	// Did every process finish? The agreement raises at every survivor
	// if one died, whoever saw it.
	flag, aerr := ft.Agree(ctx, world, ok)
	if aerr == nil && flag == 1 {
		mine, err := rma.View[int64](win)
		if err != nil {
			return err
		}
		for j, x := range mine {
			if want := sumOver(all(n), me*block+j); x != want {
				return fmt.Errorf("element %d is %d, want %d", me*block+j, x, want)
			}
		}
		fmt.Printf("%d elements right on %d processes, nothing to repair\n", block, n)
		return win.Free(ctx)
	}
	if aerr != nil && !errors.Is(aerr, fabric.ErrProcFailed) {
		return aerr
	}

	// Phase 2: repair, in this process's block, only what the dead
	// process may have written.
	s, err := ft.Shrink(ctx, world)
	if err != nil {
		return err
	}
	defer s.Free()
	survivors := s.Group().Members() // world ranks
	mine, repaired := make([]int64, block), 0
	if win == nil {
		// No window was made: nothing was summed anywhere.
		for j := range mine {
			mine[j] = sumOver(survivors, me*block+j)
			repaired++
		}
	} else {
		view, err := rma.View[int64](win)
		if err != nil {
			return err
		}
		copy(mine, view)
		for _, u := range win.Undefined().Exposed {
			for off := u.Off; off < u.Off+u.Len; off += 8 {
				j := int(off / 8)
				mine[j] = sumOver(survivors, me*block+j)
				repaired++
			}
		}
		win.Free(ctx) // raises, with a member failed; it releases all the same
	}

	// Phase 3: a window over the survivors, the elements spread over them
	// again, moved with one fence epoch.
	m := s.Size()
	per := (total + m - 1) / m
	nw, err := rma.Allocate(ctx, s, 8*per, 8, rma.Info{})
	if err != nil {
		return err
	}
	if err := nw.Fence(ctx, rma.NoPrecede); err != nil {
		return err
	}
	for j, x := range mine {
		i := me*block + j
		if err := rma.Put(ctx, nw, []int64{x}, i/per, i%per); err != nil {
			return err
		}
	}
	if err := nw.Fence(ctx, rma.NoSucceed); err != nil {
		return err
	}
	// The dead processes' blocks went with them: their new owners
	// recompute them.
	lost := 0
	dst, err := rma.View[int64](nw)
	if err != nil {
		return err
	}
	for w := range n {
		if slices.Contains(survivors, w) {
			continue
		}
		for i := w * block; i < (w+1)*block; i++ {
			if i/per == s.Rank() {
				dst[i%per] = sumOver(survivors, i)
				lost++
			}
		}
	}
	for j, x := range dst {
		i := s.Rank()*per + j
		if i >= total {
			break
		}
		if want := sumOver(survivors, i); x != want {
			return fmt.Errorf("element %d is %d, want %d", i, x, want)
		}
	}
	fmt.Printf("%d elements right on %d processes: repaired %d undefined, recomputed %d lost\n",
		min(per, total-s.Rank()*per), m, repaired, lost)
	return nw.Free(ctx)
}

// sum adds this process's terms into every block of win, and reports
// whether it reached every block (1) or a failure stopped it (0).
func sum(ctx context.Context, win *rma.Window, me, n int) (int, error) {
	// Accumulates are atomic, and nobody takes an exclusive lock: no lock
	// is needed (NoCheck), so none can fail because a process died.
	if err := win.LockAll(ctx, rma.NoCheck); err != nil {
		return 0, err
	}
	terms := make([]int64, block)
	for k := 1; k <= n; k++ {
		h := (me + k) % n
		for j := range terms {
			terms[j] = f(me, h*block+j)
		}
		// An accumulate to a process known failed raises; the others go on.
		if err := rma.Accumulate(ctx, win, terms, h, 0, op.Sum[int64]()); err != nil && !errors.Is(err, fabric.ErrProcFailed) {
			return 0, err
		}
		if k == 1 {
			inject.Point(me, "accumulated") // dies with one block summed, the others not
		}
	}
	err := win.UnlockAll(ctx)
	if errors.Is(err, fabric.ErrProcFailed) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// sumOver is element i's sum over the processes rs.
func sumOver(rs []int, i int) int64 {
	var x int64
	for _, r := range rs {
		x += f(r, i)
	}
	return x
}

func all(n int) []int {
	rs := make([]int, n)
	for i := range rs {
		rs[i] = i
	}
	return rs
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "ftarray:", err)
		os.Exit(1)
	}
}
