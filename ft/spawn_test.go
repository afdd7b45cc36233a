//go:build linux

package ft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

func init() { progs.Add("spawnring", progSpawnRing) }

// progSpawnRing: 3 processes with detectors spawn a fourth, which starts
// its own; then world rank 1 dies, and later the spawned process. With
// the heartbeat the only failure source (RIVET_FT_SOURCES=heartbeat),
// only the detectors' ring — which the spawned process joined — finds
// them, and only the failure notices tell the others: the spawned
// process learns of rank 1's failure, the spawners of its.
func progSpawnRing(ctx context.Context, ep *fabric.Endpoint) error {
	d, err := Start(ctx, ep, matrixOptions())
	must(err, "start")
	defer d.Stop()
	var ic *fabric.Comm
	child := ep.Parent() != nil
	if child {
		ic = ep.Parent()
	} else {
		self, err := os.Executable()
		must(err, "executable")
		ic, err = ep.World().Spawn(ctx, 0, self, []string{"-test.run=^$"}, 1)
		must(err, "spawn")
	}
	must(collectives.Barrier(ctx, ic), "barrier across")
	me := ep.World().Group().Members()[ep.World().Rank()]
	// Every process's ring now holds all four: 0 watches 3, 3 watches 2.
	ready := func(v int) {
		// v dies once everyone else is past the barrier above and has
		// its receive posted (a message each, to v).
		if me == v {
			time.Sleep(100 * time.Millisecond)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	// World rank 1 dies; the spawned process learns it from the notices.
	ready(1)
	if child {
		if _, err := ic.Recv(ctx, make([]byte, 1), 1, 5); !errors.Is(err, fabric.ErrProcFailed) {
			failf("receive from spawner 1, killed: %v", err)
		}
		fmt.Println("the spawned process learned of world rank 1")
		time.Sleep(200 * time.Millisecond)
		ready(me) // now the spawned process dies
	}
	if _, err := ep.World().Recv(ctx, make([]byte, 1), 1, 5); !errors.Is(err, fabric.ErrProcFailed) {
		failf("receive from world rank 1, killed: %v", err)
	}
	if _, err := ic.Recv(ctx, make([]byte, 1), 0, 6); !errors.Is(err, fabric.ErrProcFailed) {
		failf("receive from the spawned process, killed: %v", err)
	}
	fmt.Printf("world rank %d learned of the spawned process's failure\n", me)
	return nil
}

// TestSpawnedInRing: the detectors' ring and the failure notices span the
// processes a spawn joined (heartbeat only, over shared memory on the
// host and verbs in the VM).
func TestSpawnedInRing(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			env := append([]string{"RIVET_FT_SOURCES=heartbeat", fabric.UniverseEnv + "=4"}, way.env...)
			out, errs, _ := progs.Run(t, 3, "spawnring", true, env...)
			for _, want := range []string{"[3] the spawned process learned of world rank 1",
				"[0] world rank 0 learned of the spawned process's failure", "[2] world rank 2 learned of the spawned process's failure",
				"[0] rank 0 ok", "[2] rank 2 ok"} {
				if !strings.Contains(out, want) {
					t.Fatalf("%q missing\n%s\n%s", want, out, errs)
				}
			}
		})
	}
}
