//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() {
	progs.Add("idlewait", progIdleWait)
	ownNodes("idlewait", func() bool { return os.Getenv("IDLEWAIT_ONE_NODE") == "" })
}

// progIdleWait: with every peer over verbs on another node, a receive
// that waits sleeps on the provider's completions (unless
// RIVET_WAIT=poll, or the ranks share a node): rank 0 waits for a
// message rank 1 sends 300 ms late. What the wait did past its spin is
// counted, not timed (CPU time under a loaded hypervisor is billed for
// what the host did): a wait that sleeps by event slept, yielded only
// when a completion beat its arm — a few times at most, for the message
// and rank 0's own sends — and slept no more often than its bound allows
// (each sleep lasts idleWait unless a completion ends it); a polling wait
// never slept. A try whose wait found the message before it went idle
// (rank 0 off the CPU for the 300 ms) shows nothing and is tried again.
// The message still arrives, and so does one after it.
func progIdleWait(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	event := os.Getenv("RIVET_WAIT") != WaitPoll && os.Getenv("IDLEWAIT_ONE_NODE") == ""
	if got := ep.e.idler != nil; got != event {
		failf("sleeping on completions: %v, want %v (RIVET_WAIT=%q)", got, event, os.Getenv("RIVET_WAIT"))
	}
	buf := make([]byte, 8)
	// The first exchange connects the pair: no idle time in it.
	if _, err := w.Sendrecv(ctx, []byte("hello"), 1-w.Rank(), 1, buf, 1-w.Rank(), 1); err != nil {
		failf("sendrecv: %v", err)
	}
	const tries = 10
	if w.Rank() == 1 {
		for {
			time.Sleep(300 * time.Millisecond)
			must(w.Send(ctx, []byte("late"), 0, 2), "send")
			must(w.Send(ctx, []byte("next"), 0, 3), "send")
			if _, err := w.Recv(ctx, buf, 0, 4); err != nil || string(buf[:4]) == "done" {
				return err
			}
		}
	}
	const slack = 4 // completions a wait may see beside its message's
	for try := 1; ; try++ {
		sleeps, yields := ep.e.waits.sleeps.Load(), ep.e.waits.yields.Load()
		start := time.Now()
		if _, err := w.Recv(ctx, buf, 1, 2); err != nil || string(buf[:4]) != "late" {
			failf("recv: %v, %q", err, buf)
		}
		wall := time.Since(start)
		sleeps, yields = ep.e.waits.sleeps.Load()-sleeps, ep.e.waits.yields.Load()-yields
		if _, err := w.Recv(ctx, buf, 1, 3); err != nil || string(buf[:4]) != "next" {
			failf("recv: %v, %q", err, buf)
		}
		fmt.Printf("try %d: waited %v: %d sleeps, %d yields\n", try, wall, sleeps, yields)
		var done bool
		switch {
		case !event && sleeps != 0:
			failf("a wait that polls slept %d times", sleeps)
		case !event:
			done = yields > 0
		case yields > sleeps+slack:
			failf("waiting %v for a message yielded %d times and slept %d: it did not sleep", wall, yields, sleeps)
		case sleeps > uint64(wall/idleWait)+1+slack:
			failf("waiting %v for a message slept %d times: a sleep did not last %v", wall, sleeps, idleWait)
		default:
			done = sleeps > 0
		}
		if !done && try == tries {
			failf("in %d tries of 300 ms, a wait never went idle", tries)
		}
		msg := "again"
		if done {
			msg = "done"
		}
		must(w.Send(ctx, []byte(msg), 1, 4), "send")
		if done {
			return nil
		}
	}
}

// TestVerbsIdleWait: see progIdleWait; in both wait modes, and with
// the two ranks on one node.
func TestVerbsIdleWait(t *testing.T) {
	devs := testutil.RXEDevices(t)
	for name, env := range map[string][]string{
		"auto":     {"RIVET_WAIT=auto"},
		"poll":     {"RIVET_WAIT=poll"},
		"one-node": {"RIVET_WAIT=auto", "IDLEWAIT_ONE_NODE=1"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Log(runOK(t, 2, "idlewait", append([]string{"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + devs[0]}, env...)...))
		})
	}
}

// TestWaitMode: the wait modes an Option and RIVET_WAIT take, and a
// clear error for any other.
func TestWaitMode(t *testing.T) {
	for in, want := range map[string]string{"": WaitAuto, "auto": WaitAuto, "POLL": WaitPoll} {
		o, err := buildOptions([]Option{WithWaitMode(in)})
		if err != nil || o.wait != want {
			t.Errorf("WithWaitMode(%q): %q, %v; want %q", in, o.wait, err, want)
		}
	}
	_, err := buildOptions([]Option{WithWaitMode("spin")})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"spin"`) {
		t.Errorf("WithWaitMode(\"spin\"): %v, want ErrInvalid naming it", err)
	}
	t.Setenv("RIVET_WAIT", "poll")
	if o, err := buildOptions(nil); err != nil || o.wait != WaitPoll {
		t.Errorf("RIVET_WAIT=poll: %q, %v", o.wait, err)
	}
	if o, err := buildOptions([]Option{WithWaitMode(WaitAuto)}); err != nil || o.wait != WaitAuto {
		t.Errorf("the Option over RIVET_WAIT=poll: %q, %v", o.wait, err)
	}
}
