//go:build linux

package fabric

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

// TestHealthPeerGone: a peer of this node that exited, and was reaped,
// before this process opened its pidfd — one that closes as soon as Init
// returns can, on a slow machine — is judged at the first check, as one
// whose pidfd fired: stopped if it said goodbye, failed if not. (Before,
// it was silently never watched, and stayed alive here for good:
// TestCleanExit/verbs once waited 30 s for it in CI.)
func TestHealthPeerGone(t *testing.T) {
	var gone [2]int
	for i := range gone {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil { // (reaped)
			t.Fatal(err)
		}
		gone[i] = cmd.Process.Pid
	}
	e := newEngine(0, 3)
	bye := &goodbyes{fd: -1, said: []bool{false, true, false}} // rank 1 said goodbye, rank 2 did not
	h := newHealth([]int{0, 1, 2}, []int{os.Getpid(), gone[0], gone[1]}, 0, bye)
	if len(h.gone) != 2 {
		t.Fatalf("%d peers recorded gone, want 2", len(h.gone))
	}
	e.health = h
	h.check(e)
	if err := e.failed[1]; !errors.Is(err, ErrClosed) || errors.Is(err, ErrProcFailed) {
		t.Errorf("rank 1, gone after its goodbye: %v, want closed", err)
	}
	if err := e.failed[2]; !errors.Is(err, ErrProcFailed) {
		t.Errorf("rank 2, gone without a goodbye: %v, want failed", err)
	}
}

// TestGoneBeforeReached: a process that joined by a spawn and is gone
// before this one reaches it failed unless it said goodbye. Told only
// "closed", the agreements never heard of it, and one waited for its
// contribution for good (examples/ftrespawn, the spawn root killed
// right after the spawn: about 1 run in 10 under load).
func TestGoneBeforeReached(t *testing.T) {
	e := newEngine(0, 3)
	if err := e.goneCause(2); !errors.Is(err, ErrProcFailed) {
		t.Errorf("no goodbyes known: %v, want failed", err)
	}
	e.health = &health{bye: &goodbyes{fd: -1, said: []bool{false, true, false}}}
	if err := e.goneCause(1); !errors.Is(err, ErrClosed) || errors.Is(err, ErrProcFailed) {
		t.Errorf("after its goodbye: %v, want closed", err)
	}
	if err := e.goneCause(2); !errors.Is(err, ErrProcFailed) {
		t.Errorf("without a goodbye: %v, want failed", err)
	}
	e.markFailedNow(2, e.goneCause(2))
	if len(e.order) != 1 || e.order[0] != 2 {
		t.Errorf("known failed, in order: %v, want [2]", e.order)
	}
}
