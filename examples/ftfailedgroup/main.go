//go:build linux

// Command ftfailedgroup is MPI 4.1's Examples 16.2 and 16.3: the group of
// failed processes every survivor agrees on. GetFailed is local — each
// process names the failures it knows of — so the two functions here
// make it consistent, one by shrinking (the survivors' communicator is
// the same everywhere, so its complement is), one by acknowledging and
// agreeing until an agreement succeeds (then every survivor acknowledged
// the same failures).
//
//	rivetrun -ft -np 6 go run ./examples/ftfailedgroup
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
)

// failedByShrink is Comm_failure_allget (Example 16.2): the members of c
// that are not in the shrunk communicator.
func failedByShrink(ctx context.Context, c *fabric.Comm) (fabric.Group, error) {
	s, err := ft.Shrink(ctx, c)
	if err != nil {
		return fabric.Group{}, err
	}
	defer s.Free()
	return c.Group().Excl(rankIn(c, s.Group().Members()))
}

// rankIn is the ranks in c of the processes with these world ranks.
func rankIn(c *fabric.Comm, world []int) []int {
	g := c.Group()
	out := make([]int, len(world))
	for i, w := range world {
		out[i] = g.RankOf(w)
	}
	return out
}

// failedByAgree is Comm_failure_allget2 (Example 16.3): acknowledge every
// known failure and agree, until the agreement succeeds everywhere; then
// the acknowledged failures are the same at every survivor.
func failedByAgree(ctx context.Context, c *fabric.Comm) (fabric.Group, error) {
	acked := 0
	for {
		acked = c.AckAllFailed()
		_, err := ft.Agree(ctx, c, 1)
		if err == nil {
			break
		}
		if !errors.Is(err, fabric.ErrProcFailed) {
			return fabric.Group{}, err
		}
	}
	failed := c.GetFailed().Members()[:acked]
	return c.Group().Incl(rankIn(c, failed))
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
	inject.Point(w.Rank(), "init")
	// A barrier raises ErrProcFailed at a member that learns of a failure
	// before it completes, even if the failed process had completed it
	// (MPI's default error uniformity is local): go on, to learn which.
	if err := collectives.Barrier(ctx, w); err != nil && !errors.Is(err, fabric.ErrProcFailed) {
		return err
	}
	inject.Point(w.Rank(), "start")
	byAgree, err := failedByAgree(ctx, w)
	if err != nil {
		return err
	}
	byShrink, err := failedByShrink(ctx, w)
	if err != nil {
		return err
	}
	a, s := byAgree.Members(), byShrink.Members()
	slices.Sort(a) // (GetFailed's order is the order this process learned in)
	fmt.Printf("failed, by agreement %v, by shrink %v\n", a, s)
	if !slices.Equal(a, s) {
		return fmt.Errorf("the two ways disagree: %v and %v", a, s)
	}
	return nil
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "ftfailedgroup:", err)
		os.Exit(1)
	}
}
