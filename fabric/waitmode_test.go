//go:build linux

package fabric

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() {
	progs.Add("idlewait", progIdleWait)
	ownNodes("idlewait", func() bool { return os.Getenv("IDLEWAIT_ONE_NODE") == "" })
}

// cpuTime is the CPU time this process has used, every thread's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &ru), "getrusage")
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// progIdleWait: with every peer over verbs on another node, a receive
// that waits sleeps on the provider's completions (unless
// RIVET_WAIT=poll, or the ranks share a node): rank 0 waits for a
// message rank 1 sends 300 ms late, and uses less CPU than half the wait
// — a spinning wait uses all of it that it is given. The message still
// arrives, and so does one after it.
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
	if w.Rank() == 1 {
		time.Sleep(300 * time.Millisecond)
		must(w.Send(ctx, []byte("late"), 0, 2), "send")
		must(w.Send(ctx, []byte("next"), 0, 3), "send")
		return nil
	}
	before, start := cpuTime(), time.Now()
	if _, err := w.Recv(ctx, buf, 1, 2); err != nil || string(buf[:4]) != "late" {
		failf("recv: %v, %q", err, buf)
	}
	wall, used := time.Since(start), cpuTime()-before
	if event && used > wall/2 {
		failf("waiting %v for a message used %v of CPU: it did not sleep", wall, used)
	}
	if _, err := w.Recv(ctx, buf, 1, 3); err != nil || string(buf[:4]) != "next" {
		failf("recv: %v, %q", err, buf)
	}
	return nil
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
			runOK(t, 2, "idlewait", append([]string{"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + devs[0]}, env...)...)
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
