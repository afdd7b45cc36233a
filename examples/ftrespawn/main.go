//go:build linux

// Command ftrespawn keeps a job at its full size through failures: when
// a process dies, the survivors revoke, shrink, spawn a replacement,
// merge with it, give it the dead process's number and its data from a
// neighbour's in-memory copy, and go on — finishing with the same result
// as a run without failure ("shrink, spawn, merge", as Fenix and Legio
// recover).
//
//	rivetrun -n 4 -ft -expect-failures -universe 12 go run ./examples/ftrespawn
//
// Each process owns a block of numbers and, every step, updates it and
// sends a copy to its right neighbour; a step counts once every process
// agreed it finished (ft.Agree), and each keeps its block and its left
// neighbour's as they were then. A replacement gets the dead process's
// block from the dead one's right neighbour and its left neighbour's
// block from that neighbour, so failures of processes that are not
// neighbours — at once, one after another, a replacement's, or one during
// the recovery itself — lose nothing; a process and its neighbour failing
// together take a block with them, and the run ends with an error. The universe
// (-universe) must leave room for every replacement the run will spawn.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/op"
)

const (
	steps    = 10
	blockLen = 512
)

// state is one process's share of the computation.
type state struct {
	rank  int       // its number in the job: kept through recoveries, taken over by a replacement
	step  int       // the next step to do
	block []float64 // its numbers, as of the last step every process finished
	left  []float64 // its left neighbour's, likewise
}

// detector is the failure detector's options: -timeout sets its timeout
// (longer across emulated nodes, whose reads come late).
var detector ft.Options

func main() {
	flag.DurationVar(&detector.Timeout, "timeout", 0, "the failure detector's `timeout` (0: its default)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	d, err := ft.Start(ctx, ep, detector)
	if err != nil {
		return err
	}
	defer d.Stop()
	me := ep.World().Group().Members()[ep.World().Rank()] // world rank, for the kill points

	var comm *fabric.Comm
	var st state
	if p := ep.Parent(); p != nil {
		// A replacement: take over a dead process's number and data.
		if comm, st, err = join(ctx, p); err != nil {
			fmt.Printf("replacement world rank %d abandoned: %v\n", me, err)
			return nil // its spawners gave up on it and spawn again
		}
	} else {
		comm = ep.World()
		st = state{rank: comm.Rank(), block: make([]float64, blockLen), left: make([]float64, blockLen)}
	}
	n := comm.Size()
	for st.step < steps {
		inject.Point(me, fmt.Sprintf("step%d", st.step))
		err := step(ctx, comm, &st)
		if err == nil {
			continue
		}
		if !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
			return err
		}
		if comm, err = respawn(ctx, comm, &st, n, me); err != nil {
			return err
		}
	}
	sum := []float64{0}
	if err := collectives.Allreduce(ctx, comm, []float64{checksum(st.block)}, sum, op.Sum[float64]()); err != nil {
		return err
	}
	fmt.Printf("rank %d of %d (world rank %d): checksum %.6f\n", st.rank, comm.Size(), me, sum[0])
	return nil
}

// step updates this process's block, sends it to the right neighbour and
// takes the left one's; the step counts once every process agrees it
// finished. On an error the state is as before the step.
func step(ctx context.Context, comm *fabric.Comm, st *state) error {
	n, r := comm.Size(), comm.Rank()
	next := slices.Clone(st.block)
	for i := range next {
		next[i] = math.Sin(next[i]+float64(st.step*(st.rank+1))) + float64(i%7)
	}
	left := make([]float64, blockLen)
	recv, err := fabric.IrecvSlice(comm, left, (r+n-1)%n, st.step)
	if err == nil {
		var send fabric.Request
		if send, err = fabric.IsendSlice(comm, next, (r+1)%n, st.step); err == nil {
			err = fabric.WaitAll(ctx, []fabric.Request{recv, send}, nil)
		}
	}
	ok := 0
	if err == nil {
		ok = 1
	}
	flag, aerr := ft.Agree(ctx, comm, ok)
	switch {
	case aerr != nil:
		return aerr
	case flag == 0:
		return fmt.Errorf("%w: step %d did not finish everywhere (%v)", fabric.ErrProcFailed, st.step, err)
	}
	st.block, st.left, st.step = next, left, st.step+1
	return nil
}

// respawn brings comm back to n processes: revoke it, shrink it, spawn a
// replacement for each process that failed, hand them their numbers and
// data, merge and order the result by number. A failure on the way —
// during the shrink, the spawn or the merge — starts it again from the
// survivors; replacements that did not make it are abandoned.
func respawn(ctx context.Context, comm *fabric.Comm, st *state, n, me int) (*fabric.Comm, error) {
	for round := 0; ; round++ {
		comm.Revoke()
		inject.Point(me, "shrink")
		s, err := ft.Shrink(ctx, comm)
		if err != nil {
			return nil, err
		}
		// Which numbers are missing: every survivor says its own. A
		// collective may fail at some members and succeed at others (a
		// process that dies after sending its part); with UniformColl it
		// fails everywhere or nowhere, so the survivors all go on to the
		// spawn or all start again.
		if err := s.SetErrorUniform(fabric.UniformColl); err != nil {
			return nil, err
		}
		ranks := make([]int64, s.Size())
		err = collectives.Allgather(ctx, s, []int64{int64(st.rank)}, ranks)
		if err != nil {
			comm = s
			continue
		}
		var missing []int
		for r := range n {
			if !slices.Contains(ranks, int64(r)) {
				missing = append(missing, r)
			}
		}
		for _, d := range missing {
			// Its data lives on at its neighbours only.
			if slices.Contains(missing, (d+1)%n) || slices.Contains(missing, (d+n-1)%n) {
				return nil, fmt.Errorf("numbers %v failed: %d and a neighbour of it, whose copy of its data went with them", missing, d)
			}
		}
		inject.Point(me, "spawn")
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		ic, err := s.Spawn(ctx, 0, self, os.Args[1:], len(missing))
		// Bit 0: spawned. Bit 1: worth another round — not if the
		// launcher cannot spawn or the universe is full (ErrNotSupported),
		// which no round mends.
		ok := spawned | again
		switch {
		case errors.Is(err, fabric.ErrNotSupported) || errors.Is(err, fabric.ErrInvalid):
			ok = 0
		case err != nil:
			ok = again
		}
		flag, aerr := ft.Agree(ctx, s, ok)
		if aerr != nil || flag&spawned == 0 {
			if ic != nil {
				ic.Revoke() // the replacements see it and give up
				ic.Free()
			}
			if aerr == nil && flag&again == 0 {
				if err == nil {
					err = errors.New("the spawn root could not spawn them")
				}
				return nil, fmt.Errorf("no replacement for numbers %v: %w", missing, err)
			}
			comm = s
			continue
		}
		next, err := handOver(ctx, ic, s, st, missing, n, me)
		if err == nil {
			fmt.Printf("rank %d: back to %d processes (replaced %v)\n", st.rank, next.Size(), missing)
			return next, nil
		}
		if errors.Is(err, errAgain) {
			comm = s
			continue
		}
		return nil, err
	}
}

// The bits of the survivors' agreement on a spawn.
const (
	spawned = 1 << iota
	again
)

// errAgain says a recovery must start again from the survivors.
var errAgain = errors.New("the recovery failed; again")

// handOver gives each replacement its number and data, merges with them
// and orders the result by number; every process of both sides learns
// whether all of it worked (an agreement on the intercommunicator and
// one on each side).
func handOver(ctx context.Context, ic, s *fabric.Comm, st *state, missing []int, n, me int) (*fabric.Comm, error) {
	var errs []error
	for i, d := range missing {
		if s.Rank() == 0 {
			errs = append(errs, fabric.SendSlice(ctx, ic, []int64{int64(d), int64(st.step)}, i, 1))
		}
		if (d+1)%n == st.rank { // holds the dead one's block
			errs = append(errs, fabric.SendSlice(ctx, ic, st.left, i, 2))
		}
		if (d+n-1)%n == st.rank { // is the dead one's left neighbour
			errs = append(errs, fabric.SendSlice(ctx, ic, st.block, i, 3))
		}
	}
	inject.Point(me, "merge")
	merged, err := ic.Merge(ctx, false)
	errs = append(errs, err)
	var next *fabric.Comm
	if err == nil {
		next, err = merged.Split(ctx, 0, st.rank)
		errs = append(errs, err, merged.Free())
	}
	if !agreed(ctx, ic, s, errors.Join(errs...)) {
		ic.Revoke()
		ic.Free()
		if next != nil {
			next.Free()
		}
		return nil, errAgain
	}
	return next, ic.Free()
}

// agreed reports whether every process of both sides of ic succeeded
// (err nil): the intercommunicator's agreement gives the other side's
// AND, side's own agreement this side's.
func agreed(ctx context.Context, ic, side *fabric.Comm, err error) bool {
	ok := 1
	if err != nil {
		ok = 0
	}
	theirs, err1 := ft.Agree(ctx, ic, ok)
	ours, err2 := ft.Agree(ctx, side, ok)
	return err1 == nil && err2 == nil && theirs == 1 && ours == 1
}

// join is a replacement's side of handOver.
func join(ctx context.Context, p *fabric.Comm) (*fabric.Comm, state, error) {
	var errs []error
	hdr := make([]int64, 2)
	st := state{block: make([]float64, blockLen), left: make([]float64, blockLen)}
	_, err := fabric.RecvSlice(ctx, p, hdr, 0, 1)
	errs = append(errs, err)
	st.rank, st.step = int(hdr[0]), int(hdr[1])
	_, err = fabric.RecvSlice(ctx, p, st.block, fabric.AnySource, 2)
	errs = append(errs, err)
	_, err = fabric.RecvSlice(ctx, p, st.left, fabric.AnySource, 3)
	errs = append(errs, err)
	merged, err := p.Merge(ctx, true)
	errs = append(errs, err)
	var next *fabric.Comm
	if err == nil {
		next, err = merged.Split(ctx, 0, st.rank)
		errs = append(errs, err, merged.Free())
	}
	ep := p.Endpoint()
	if !agreed(ctx, p, ep.World(), errors.Join(errs...)) {
		return nil, st, fmt.Errorf("the hand-over failed")
	}
	return next, st, nil
}

func checksum(b []float64) float64 {
	s := 0.0
	for i, v := range b {
		s += v * float64(i+1)
	}
	return s
}
