//go:build linux

package ft_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
)

// The skeleton of a fault-tolerant step: do the work, agree on whether
// it worked everywhere, and on a failure revoke and go on with the
// survivors (here, a job of one, where nothing fails).
func ExampleAgree() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	// A job under a launcher starts the failure detector here, in every
	// process, spawned ones too:
	//
	//	d, err := ft.Start(ctx, ep, ft.Options{})
	//	defer d.Stop()
	//
	// (A job of one started without a launcher has no peer to watch, and
	// no heartbeat: Start says ErrNotSupported.)

	comm := ep.World()
	err = collectives.Barrier(ctx, comm) // the step's communication
	ok := 1
	if err != nil {
		ok = 0
	}
	all, err := ft.Agree(ctx, comm, ok)
	switch {
	case errors.Is(err, fabric.ErrProcFailed) || err == nil && all == 0:
		comm.Revoke()
		if comm, err = ft.Shrink(ctx, comm); err != nil {
			log.Fatal(err)
		}
	case err != nil:
		log.Fatal(err)
	}
	fmt.Printf("agreed %d, %d process(es) go on\n", all, comm.Size())
	// Output: agreed 1, 1 process(es) go on
}

// Shrink makes the communicator of the processes not known failed, with
// one agreement, the same at every survivor.
func ExampleShrink() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()

	s, err := ft.Shrink(ctx, ep.World())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Free()
	fmt.Println(s.Size(), "survivor(s); failed:", ep.World().GetFailed().Size())
	// Output: 1 survivor(s); failed: 0
}
