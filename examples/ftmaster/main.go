//go:build linux

// Command ftmaster is MPI 4.1's Example 16.4, a fault-tolerant master and
// workers: rank 0 hands out work items and collects the results with a
// receive from any source; when a worker fails, the receive raises
// (fabric.ErrProcFailedPending while it stays posted, or
// fabric.ErrProcFailed), the master acknowledges the failure, and the
// item the worker held goes to another worker. The answer is the sum of
// the squares of 1..Items, whichever workers survive.
//
//	rivetrun -ft -np 5 go run ./examples/ftmaster
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
)

// Items is the number of work items.
const Items = 40

const (
	tagWork   = 1 // master → worker: an item (0: stop)
	tagResult = 2 // worker → master: the item and its square
)

func worker(ctx context.Context, w *fabric.Comm) error {
	var b [16]byte
	for done := 0; ; done++ {
		if _, err := w.Recv(ctx, b[:8], 0, tagWork); err != nil {
			return err
		}
		item := binary.LittleEndian.Uint64(b[:])
		if item == 0 {
			return nil
		}
		if done == 0 {
			inject.Point(w.Rank(), "work") // dies holding its first item
		}
		binary.LittleEndian.PutUint64(b[8:], item*item)
		if err := w.Send(ctx, b[:], 0, tagResult); err != nil {
			return err
		}
	}
}

func master(ctx context.Context, w *fabric.Comm) (uint64, error) {
	n := w.Size()
	holds := make([]uint64, n) // the item each worker holds (0: idle)
	dead := make([]bool, n)
	var queue []uint64
	for i := uint64(Items); i > 0; i-- {
		queue = append(queue, i)
	}
	var work [8]byte
	// give hands the next item to worker r, or requeues it if r is gone.
	give := func(r int) {
		if len(queue) == 0 || dead[r] {
			return
		}
		item := queue[len(queue)-1]
		binary.LittleEndian.PutUint64(work[:], item)
		if err := w.Send(ctx, work[:], r, tagWork); err != nil {
			return // failed: the receive below will say so
		}
		queue = queue[:len(queue)-1]
		holds[r] = item
	}
	for r := 1; r < n; r++ {
		give(r)
	}
	var sum uint64
	var res [16]byte
	req, err := w.Irecv(res[:], fabric.AnySource, tagResult)
	if err != nil {
		return 0, err
	}
	for done := 0; done < Items; {
		st, err := req.Wait(ctx)
		switch {
		case err == nil:
			sum += binary.LittleEndian.Uint64(res[8:])
			done++
			holds[st.Source] = 0
			give(st.Source)
		case errors.Is(err, fabric.ErrProcFailed) || errors.Is(err, fabric.ErrProcFailedPending):
			// Acknowledge every failure known, and requeue what the
			// failed workers held.
			acked := w.AckFailed(n)
			g := w.Group()
			for _, wr := range w.GetFailed().Members()[:acked] {
				r := g.RankOf(wr)
				if !dead[r] {
					dead[r] = true
					if holds[r] != 0 {
						queue = append(queue, holds[r])
						holds[r] = 0
					}
				}
			}
			for r := 1; r < n; r++ {
				if holds[r] == 0 {
					give(r)
				}
			}
			if errors.Is(err, fabric.ErrProcFailedPending) {
				continue // still posted: no new receive
			}
		default:
			return 0, err
		}
		if done < Items {
			if req, err = w.Irecv(res[:], fabric.AnySource, tagResult); err != nil {
				return 0, err
			}
		}
	}
	var stop [8]byte
	for r := 1; r < n; r++ {
		if !dead[r] {
			w.Send(ctx, stop[:], r, tagWork) // a worker that failed since: no matter
		}
	}
	return sum, nil
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
	if w.Size() < 2 {
		return fmt.Errorf("ftmaster needs 2 ranks or more")
	}
	if w.Rank() != 0 {
		return worker(ctx, w)
	}
	sum, err := master(ctx, w)
	if err != nil {
		return err
	}
	fmt.Printf("sum of squares 1..%d: %d (want %d); failed workers %v\n", Items, sum, Items*(Items+1)*(2*Items+1)/6, w.GetFailed().Members())
	return nil
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "ftmaster:", err)
		os.Exit(1)
	}
}
