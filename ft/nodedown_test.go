//go:build linux

package ft

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/internal/vm"
)

// A node of several processes dies. Its processes were watched across
// nodes by one observer only, which had never connected to some of them:
// a connection to a dead node is neither made nor refused, and no read of
// it is answered. The observer asks the node itself (ulfm.NodeProbe) and
// convicts all of it at once. The heartbeat is the only failure source,
// and the transport's retries never run out within the test (a timeout
// of 2.4 hours): otherwise a send to a dead process over a connection
// made before — the failure notices go to a few neighbours each — would
// fail it too, and the test would not tell the question's work from the
// transport's.

func init() { progs.Add("nodedown", progNodeDown) }

// nodeDownFirst is the first rank on the node TestHostNodeDown kills
// (node 3, ranks 2 to 5; node 1 holds rank 0 and node 2 rank 1).
const nodeDownFirst = 2

func progNodeDown(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	d, err := Start(ctx, ep, Options{Timeout: clusterTimeout})
	must(err, "start the detector")
	defer d.Stop()
	// The detector's start ends in a barrier: a dissemination among 6,
	// after which rank 0 has talked with ranks 1, 2, 4 and 5 — not 3.
	must(collectives.Barrier(ctx, w), "barrier")
	if me >= nodeDownFirst {
		for t0 := time.Now(); time.Since(t0) < time.Minute; time.Sleep(10 * time.Millisecond) {
			ep.Poll()
		}
		failf("rank %d lived on past its node's death", me)
	}
	// Rank 1 may still wait in the barrier for a message from node 3:
	// the kill waits for its word.
	var t0 time.Time
	if me == 1 {
		must(w.Send(ctx, nil, 0, tagReady), "ready")
	} else {
		_, err := w.Recv(ctx, nil, 1, tagReady)
		must(err, "rank 1 ready")
		must(vm.Control(ctx, "kill 3"), "kill node 3")
		t0 = time.Now()
	}
	dead := n - nodeDownFirst
	// A hang guard, not a bound on detection: the first conviction needs
	// the timeout's worth of the observer's looking, to which a look on
	// time adds its tick (5 ms) and a late one two ticks — 200 to 400
	// looks, however late they come.
	for end := time.Now().Add(3 * time.Minute); w.GetFailed().Size() < dead; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			failf("3 minutes after node 3 died, rank %d knows %v failed, not all of ranks %d to %d", me, w.GetFailed().Members(), nodeDownFirst, n-1)
		}
		ep.Poll()
	}
	if g := w.GetFailed().Members(); g[0] < nodeDownFirst || g[len(g)-1] >= n || len(g) != dead {
		failf("GetFailed names %v, want ranks %d to %d", g, nodeDownFirst, n-1)
	}
	if me == 0 { // (on its own stdout: the nodes' stderr interleave)
		for r := nodeDownFirst; r < n; r++ {
			fmt.Printf("rank 0: %v\n", ep.Failure(r))
		}
	}
	if me == 1 {
		must(w.Send(ctx, nil, 0, tagKnew), "tell rank 0")
	} else {
		_, err := w.Recv(ctx, nil, 1, tagKnew)
		must(err, "rank 1's word")
		fmt.Printf("nodedown: the last survivor knew all %d failed after %v\n", dead, time.Since(t0).Round(time.Millisecond))
	}
	settle(ctx, w)
	shrunk(ctx, w, nodeDownFirst)
	if me == 0 {
		survivorsDone(ctx, 2, 2)
	}
	return nil
}

// TestHostNodeDown kills a node of four processes, watched with the
// heartbeat alone: every survivor learns of all four, the three the
// observer had not convicted through the node's question, and they agree
// and shrink. Without the question, rank 3 (never connected to rank 0)
// and rank 4 (connected, never read) are never convicted. How long it
// takes is printed, not bounded: the first conviction waits for a
// timeout's worth of the observer's own looking (the jitter guard), which
// a loaded host stretches. (When the guard counted the silence only from
// the observer's last late look, a fresh-clone run's load held the
// conviction off for over a minute.)
func TestHostNodeDown(t *testing.T) {
	self := testutil.Executable(t)
	nodeCmd := `if [ $RXEVM_NODE = 2 ]; then RANK=1 ` + self + `; echo $? >$RXEVM_SHARED/exit.2; ` +
		`else for r in 2 3 4 5; do RANK=$r ` + self + ` & done; wait; fi`
	env := []string{progs.Env + "=nodedown", "WORLD_SIZE=6", "MASTER_ADDR=" + vm.NodeAddr(1), "MASTER_PORT=29500",
		"RIVET_JOB_SECRET=nodedown-test", "RIVET_FT_SOURCES=heartbeat", "RIVET_VERBS_TIMEOUT=31"}
	out, errs := testutil.RunCluster(t, 3, nodeCmd, env, "sh", "-c", "RANK=0 exec "+self)
	if !strings.Contains(out, "rank 0 ok\n") || !strings.Contains(errs, "[node2] rank 1 ok\n") {
		t.Fatal("the survivors did not recover")
	}
	if !strings.Contains(out, "nodedown: the last survivor knew all 4 failed after ") {
		t.Fatal("no detection time")
	}
	for r := nodeDownFirst; r < 5; r++ {
		verdict := fmt.Sprintf("rank 0: rank -1 (world rank %d): fabric: process failed: world rank %d: ft: suspected by the failure detector: its node answered no connection", r, r)
		if !strings.Contains(out, verdict) {
			t.Errorf("rank 0 did not convict world rank %d through its node's question", r)
		}
	}
}
