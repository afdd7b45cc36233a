//go:build linux

package ft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/vm"
	"github.com/rivet-hpc/rivet/op"
	"github.com/rivet-hpc/rivet/rma"
)

// The cluster's failure matrix: one rank per node, the last node
// faulted — killed, stopped and continued, its link dropped, or cut off
// by a partition — while the survivors are in a point-to-point receive
// from its rank, a collective with it, and a window whose lock it holds.
// Every survivor learns, its operations fail with ErrProcFailed and no
// wait, GetFailed agrees, the window reports the dead lock owner and
// scopes Undefined to what it was writing, and they agree and shrink. A
// faulted node that comes back (stopped, link, partition) finds itself
// fenced or without a quorum and ends itself (ExitDeclaredFailed).

func init() { progs.Add("matrix", progMatrix) }

// faultEnv names the fault progMatrix asks for: kill, stop, link or
// partition.
const faultEnv = "RIVET_FT_CLUSTER_FAULT"

// Tags of progMatrix's messages.
const (
	tagReady  = 98 // a survivor (or the victim) is in place
	tagKnew   = 97 // a survivor knows of the failure
	tagVictim = 95 // never sent: a survivor's receive from the victim
)

// victimWords is how many words of rank 1's window the victim puts
// before it dies; the rest of the window must keep rank 1's own values.
const victimWords = 2

func progMatrix(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	n, me, v := w.Size(), w.Rank(), w.Size()-1
	fault := os.Getenv(faultEnv)
	if ep.Sources()&fabric.SourceHeartbeat != 0 { // lab/cluster.sh varies them
		d, err := Start(ctx, ep, Options{Timeout: clusterTimeout})
		must(err, "start the detector")
		defer d.Stop()
	}

	win, err := rma.Allocate(ctx, w, 8*8, 8, rma.Info{})
	must(err, "allocate a window")
	mem, err := rma.View[int64](win)
	must(err, "view")
	for i := range mem {
		mem[i] = int64(100*me + i)
	}
	must(collectives.Barrier(ctx, w), "barrier")

	var recv fabric.Request
	switch me {
	case v:
		// Hold rank 1's window exclusively, in the middle of writing it.
		must(win.Lock(ctx, rma.Exclusive, 1, 0), "the victim's lock")
		must(rma.Put(ctx, win, make([]int64, victimWords), 1, 0), "the victim's put")
		must(win.Flush(ctx, 1), "the victim's flush")
		must(w.Send(ctx, nil, 0, tagReady), "ready")
		// Killed, or fenced: cut off, it learns the others failed, sees
		// no quorum and ends itself.
		for t0 := time.Now(); time.Since(t0) < time.Minute; time.Sleep(10 * time.Millisecond) {
			ep.Poll()
		}
		failf("the victim lived on past its fault; it knows %v failed", w.GetFailed().Members())
	case 0:
		for r := 1; r <= v; r++ {
			_, err := w.Recv(ctx, nil, r, tagReady)
			must(err, "ready")
		}
	default:
		recv, err = w.Irecv(nil, v, tagVictim)
		must(err, "a receive from the victim")
		must(w.Send(ctx, nil, 0, tagReady), "ready")
	}

	// Rank 0 asks for the fault; every survivor is then in a collective
	// with the victim, which must fail once the victim is known failed.
	var t0 time.Time
	if me == 0 {
		cmds := map[string]string{
			"kill": "kill %d", "stop": "stop %d", "link": "link %d down", "partition": "partition 1,2 %d",
		}
		c, ok := cmds[fault]
		if !ok {
			failf("%s=%q: want kill, stop, link or partition", faultEnv, fault)
		}
		must(vm.Control(ctx, fmt.Sprintf(c, v+1)), "ask for the fault")
		t0 = time.Now()
	}
	sum := make([]int64, 1)
	err = collectives.Allreduce(ctx, w, []int64{1}, sum, op.Sum[int64]())
	if !isFailed(err, v) {
		failf("an allreduce with the faulted rank: %v", err)
	}
	if me != 0 {
		_, err := recv.Wait(ctx)
		if !isFailed(err, v) {
			failf("the receive from the faulted rank: %v", err)
		}
		must(w.Send(ctx, nil, 0, tagKnew), "tell rank 0")
	} else {
		self := time.Since(t0)
		for r := 1; r < v; r++ {
			_, err := w.Recv(ctx, nil, r, tagKnew)
			must(err, "a survivor's word")
		}
		fmt.Printf("%s: rank 0 knew after %v, the last survivor after %v\n", fault,
			self.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	}
	onlyVictim(ctx, ep, v)

	// The window: the victim's lock is a dead owner's; what it wrote is
	// undefined at rank 1, and nothing else is.
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := win.Lock(lctx, rma.Exclusive, 1, 0); !errors.Is(err, fabric.ErrProcFailed) {
		failf("a lock of rank 1's window, which the dead victim holds: %v", err)
	}
	if me == 1 {
		u := win.Undefined()
		if !covered(u.Exposed, v, 0, 8*victimWords) {
			failf("Undefined().Exposed %v does not hold the victim's [0, %d)", u.Exposed, 8*victimWords)
		}
		for i, x := range mem {
			if !covered(u.Exposed, v, uint64(8*i), uint64(8*i+8)) && x != int64(100*me+i) {
				failf("word %d of the window, outside Undefined %v, is %d", i, u.Exposed, x)
			}
		}
	}

	// Recovery: an agreement that reports the failure until it is
	// acknowledged, then a shrink and a collective on the survivors.
	if _, err := Agree(ctx, w, 1); !errors.Is(err, fabric.ErrProcFailed) {
		failf("an agreement before the failure was acknowledged: %v", err)
	}
	settle(ctx, w)
	s := shrunk(ctx, w, n-1)
	defer s.Free()
	if err := win.Free(lctx); !errors.Is(err, fabric.ErrProcFailed) {
		failf("freeing the window: %v", err)
	}

	// A faulted node that comes back must end itself: rank 0 brings it
	// back and waits for its exit status.
	if me == 0 && fault != "kill" {
		undo := map[string]string{"stop": "cont %d", "link": "link %d up", "partition": "heal"}[fault]
		if strings.Contains(undo, "%d") {
			undo = fmt.Sprintf(undo, v+1)
		}
		must(vm.Control(ctx, undo), "undo the fault")
		st := nodeExit(ctx, v+1)
		fmt.Printf("%s: the faulted rank ended with status %s\n", fault, st)
	}
	if me == 0 {
		survivorsDone(ctx, 2, v)
	}
	return nil
}

// survivorsDone waits until the ranks of nodes first to last, each its
// node's only rank, have ended with status 0: rank 0's end is the
// cluster's (rxevm stops every node when node 1's command ends), and the
// others' report must not be cut short.
func survivorsDone(ctx context.Context, first, last int) {
	for i := first; i <= last; i++ {
		if st := nodeExit(ctx, i); st != "0" {
			failf("node %d's rank ended with status %s", i, st)
		}
	}
}

// nodeExit waits (60 s at most) for the exit status the node command of
// node i records in the cluster's shared directory (runCluster).
func nodeExit(ctx context.Context, i int) string {
	f := filepath.Join(os.Getenv("RXEVM_SHARED"), fmt.Sprintf("exit.%d", i))
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "none: it did not end within 60 s"
}

// covered reports whether spans hold [lo, hi) of world rank r's memory.
func covered(spans []rma.Span, r int, lo, hi uint64) bool {
	for _, s := range spans {
		if s.Rank == r && s.Off <= lo && hi <= s.Off+s.Len {
			return true
		}
	}
	return false
}

// TestHostMatrix runs the matrix on clusters of three VMs, one fault
// each, one cluster at a time (testutil.RequireCluster).
func TestHostMatrix(t *testing.T) {
	for _, fault := range []string{"kill", "stop", "link", "partition"} {
		t.Run(fault, func(t *testing.T) {
			out, errs := runCluster(t, 3, "matrix", faultEnv+"="+fault)
			if !strings.Contains(out, "rank 0 ok\n") || !strings.Contains(errs, "[node2] rank 1 ok\n") {
				t.Fatal("the survivors did not recover")
			}
			m := regexp.MustCompile(fault + `: rank 0 knew after (\S+), the last survivor after (\S+)\n`).FindStringSubmatch(out)
			if m == nil {
				t.Fatal("no detection time")
			}
			// The detector convicts a silent peer across nodes once its
			// reads have gone unanswered for half the timeout, at the
			// timeout — counting only the time the observer was looking
			// (the jitter guard), which a loaded host stretches: the time
			// is reported, not bounded (lab/cluster.sh measures it on an
			// idle host).
			t.Logf("%s: the last survivor knew after %s", fault, m[2])
			if fault != "kill" && !strings.Contains(out, fault+": the faulted rank ended with status 99\n") {
				t.Errorf("the faulted rank did not end itself with status %d", fabric.ExitDeclaredFailed)
			}
		})
	}
}
