//go:build linux

package fabric

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() {
	progs.Add("allocs", progAllocs)
	ownNodes("allocs", func() bool { return os.Getenv("ALLOCS_APART") != "" })
}

// progAllocs: a blocking ping-pong allocates nothing in steady state,
// eager or rendezvous.
func progAllocs(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	runs := 2000
	if os.Getenv("ALLOCS_APART") != "" {
		// Waits sleep on completions here, and a wake-up costs a
		// rank of one VM some 0.2 ms (docs/fabric.md): fewer rounds,
		// which still show an allocation a round.
		runs = 200
	}
	for _, size := range []int{8, 64 << 10} {
		s, r := make([]byte, size), make([]byte, size)
		if w.Rank() == 1 {
			for i := 0; i < runs+1; i++ {
				if _, err := w.Recv(ctx, r, 0, 1); err != nil {
					return err
				}
				if err := w.Send(ctx, s, 0, 1); err != nil {
					return err
				}
			}
			continue
		}
		var err error
		allocs := testing.AllocsPerRun(runs, func() {
			if err == nil {
				err = w.Send(ctx, s, 1, 1)
			}
			if err == nil {
				_, err = w.Recv(ctx, r, 1, 1)
			}
		})
		if err != nil {
			return err
		}
		fmt.Printf("%d-byte ping-pong: %v allocations\n", size, allocs)
		if allocs != 0 {
			failf("a %d-byte Send+Recv allocates %v times", size, allocs)
		}
	}
	// Nonblocking: a window of receives and sends each way, WaitAll.
	peer := 1 - w.Rank()
	reqs := make([]Request, 16)
	sts := make([]Status, 16)
	s, r := make([]byte, 8), make([]byte, 8*8)
	var err error
	window := func() {
		for i := 0; i < 8; i++ {
			reqs[i] = w.irecv(r[i*8:i*8+8], peer, 2, w.ctxUser())
			reqs[8+i] = w.isend(s, peer, 2, w.ctxUser())
		}
		if e := WaitAll(ctx, reqs, sts); e != nil && err == nil {
			err = e
		}
	}
	if w.Rank() == 1 {
		for i := 0; i < runs+1; i++ {
			window()
		}
	} else {
		allocs := testing.AllocsPerRun(runs, window)
		fmt.Printf("Irecv+Isend window of 8 and WaitAll: %v allocations\n", allocs)
		if allocs != 0 {
			failf("a window of Isend/Irecv and WaitAll allocates %v times", allocs)
		}
	}
	return err
}

func TestSendRecvAllocateNothing(t *testing.T) {
	out := runOK(t, 2, "allocs")
	t.Log(out)
}

// TestVerbsSendRecvAllocateNothing: the same over the verbs provider
// (eager sends and receives, and rendezvous reads through staging), on
// one node and with each rank on a node of its own — where waits sleep
// on completions (waitmode.go).
func TestVerbsSendRecvAllocateNothing(t *testing.T) {
	devs := testutil.RXEDevices(t)
	t.Run("one-node", func(t *testing.T) {
		t.Log(runOK(t, 2, "allocs", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+devs[0]))
	})
	t.Run("nodes", func(t *testing.T) {
		t.Log(runOK(t, 2, "allocs", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+devs[0], "ALLOCS_APART=1"))
	})
}
