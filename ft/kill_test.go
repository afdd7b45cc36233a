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

func init() {
	progs.Add("kill", progKill)
	progs.Add("serial", progSerial)
}

// startDetector starts this process's detector if the heartbeat source
// is on.
func startDetector(ctx context.Context, ep *fabric.Endpoint) func() {
	if ep.Sources()&fabric.SourceHeartbeat == 0 {
		return func() {}
	}
	d, err := Start(ctx, ep, matrixOptions())
	must(err, "start the detector")
	return d.Stop
}

// matrixOptions are the detector's options in the failure matrix (the
// kill, stop and cut tests): the defaults, but over verbs in the
// soft-RoCE VM a timeout of a second. The emulated machine now and then
// holds one of its CPUs for longer than the default 200 ms, and a
// detector is only as exact as its timeout allows: in one VM suite run of
// three, an 8-rank matrix case convicted a live rank. These tests are
// about what survivors learn and agree on, not how fast; the tests of
// false positives (TestNoFalsePositive, TestSoak) keep the defaults.
func matrixOptions() Options {
	if os.Getenv("RIVET_PROVIDER") == "verbs" {
		return Options{Timeout: time.Second}
	}
	return Options{}
}

// dieWhenReady kills world rank v once every other rank in alive has
// told it that it is ready (out of any collective, which a member's
// failure may legitimately fail); the others tell it.
func dieWhenReady(ctx context.Context, w *fabric.Comm, v int, alive []int) {
	if w.Rank() != v {
		must(w.Send(ctx, nil, v, 98), "ready")
		return
	}
	for _, r := range alive {
		if r != v {
			_, err := w.Recv(ctx, nil, r, 98)
			must(err, "ready")
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// awaitFailed waits in a receive from world rank v, which never sends:
// the receive must end with ErrProcFailed naming v.
func awaitFailed(ctx context.Context, w *fabric.Comm, v int) time.Duration {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := w.Recv(ctx, make([]byte, 1), v, 99); !isFailed(err, v) {
		failf("receive from world rank %d, killed: %v", v, err)
	}
	return time.Since(t0)
}

// survivorsTalk passes a token around the survivors' ring.
func survivorsTalk(ctx context.Context, ep *fabric.Endpoint, failed map[int]bool) {
	w := ep.World()
	n, me := w.Size(), w.Rank()
	step := func(r, d int) int {
		for r = (r + d + n) % n; failed[r]; r = (r + d + n) % n {
		}
		return r
	}
	got := make([]byte, 1)
	_, err := w.Sendrecv(ctx, []byte{byte(me)}, step(me, 1), 2, got, step(me, -1), 2)
	must(err, "survivors' sendrecv")
}

// progKill: the victim is SIGKILLed once every rank is ready; every
// survivor learns it failed — from the sources RIVET_FT_SOURCES leaves on
// — and they agree on the failed group.
func progKill(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	v := victim(w.Size())
	throttleOdd(ep)
	defer startDetector(ctx, ep)()
	must(collectives.Barrier(ctx, w), "barrier")
	all := make([]int, w.Size())
	for i := range all {
		all[i] = i
	}
	dieWhenReady(ctx, w, v, all)
	took := awaitFailed(ctx, w, v)
	fmt.Printf("knew after %v\n", took.Round(time.Millisecond))
	onlyVictim(ctx, ep, v)
	return nil
}

// onlyVictim checks that world rank v is the only one GetFailed names,
// and that the survivors still talk.
func onlyVictim(ctx context.Context, ep *fabric.Endpoint, v int) {
	if g := ep.World().GetFailed(); g.Size() != 1 {
		failf("GetFailed has %d members, want 1", g.Size())
	} else if r, _ := g.WorldRank(0); r != v {
		failf("GetFailed names world rank %d, want %d", r, v)
	}
	survivorsTalk(ctx, ep, map[int]bool{v: true})
}

// TestKilled is the kill matrix: 4 and 8 ranks, each failure source alone
// and all together, over shared memory (host) and verbs (VM), where
// verbs without pidfds stands in for a remote node.
func TestKilled(t *testing.T) {
	for _, way := range ways(t) {
		sources := []string{"all", "heartbeat", "launcher", "pidfd"}
		if way.name == "verbs" {
			sources = []string{"all", "heartbeat", "launcher", "completion"}
		}
		for _, src := range sources {
			for _, n := range []int{4, 8} {
				t.Run(fmt.Sprintf("%s/%s/%d", way.name, src, n), func(t *testing.T) {
					env := append([]string{"RIVET_FT_SOURCES=" + src}, way.env...)
					out, errs, st := progs.Run(t, n, "kill", true, env...)
					if st != 128+9 {
						t.Fatalf("status %d, want 137 (the victim killed)\n%s\n%s", st, out, errs)
					}
					for r := 0; r < n; r++ {
						if r != victim(n) && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
							t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
						}
					}
					t.Logf("every survivor knew: %v", knew(out))
				})
			}
		}
	}
}

// serialVictims are killed one after another in TestRepeated.
var serialVictims = []int{5, 2, 7, 1, 4}

// progSerial: five of eight ranks killed one after another, each once
// every survivor knows of the one before; knowledge stays consistent —
// every survivor's failed group grows by the victim each time, keeping
// what it had (prefix-stable), and ends as the same set everywhere.
func progSerial(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	defer startDetector(ctx, ep)()
	must(collectives.Barrier(ctx, w), "barrier")
	failed := map[int]bool{}
	var prev []int
	for _, v := range serialVictims {
		var alive []int
		for r := 0; r < w.Size(); r++ {
			if !failed[r] {
				alive = append(alive, r)
			}
		}
		dieWhenReady(ctx, w, v, alive)
		awaitFailed(ctx, w, v)
		failed[v] = true
		g := w.GetFailed()
		var now []int
		for i := 0; i < g.Size(); i++ {
			r, _ := g.WorldRank(i)
			now = append(now, r)
		}
		if len(now) < len(prev) || fmt.Sprint(now[:len(prev)]) != fmt.Sprint(prev) {
			failf("GetFailed went from %v to %v: not prefix-stable", prev, now)
		}
		for _, r := range now {
			if !failed[r] {
				failf("GetFailed %v names world rank %d, which is alive", now, r)
			}
		}
		if len(now) != len(failed) {
			failf("GetFailed %v after %d failures", now, len(failed))
		}
		prev = now
	}
	survivorsTalk(ctx, ep, failed)
	return nil
}

func TestRepeated(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			out, errs, st := progs.Run(t, 8, "serial", true, way.env...)
			if st != 128+9 {
				t.Fatalf("status %d, want 137\n%s\n%s", st, out, errs)
			}
			dead := map[int]bool{}
			for _, v := range serialVictims {
				dead[v] = true
			}
			for r := 0; r < 8; r++ {
				if !dead[r] && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
				}
			}
		})
	}
}

func init() { progs.Add("startkill", progStartKill) }

// progStartKill: the victim is SIGKILLed around Start — before it
// (FT_TEST_WHEN=before: the others' start barrier cannot complete) or
// right after its own Start returned, while the others may still be in
// theirs (after). A failure is knowledge, not an error of Start: every
// survivor's Start succeeds, learns of the failure, and the survivors
// agree on it.
func progStartKill(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	v := victim(w.Size())
	before := os.Getenv("FT_TEST_WHEN") == "before"
	if w.Rank() == v && before {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	d, err := Start(ctx, ep, matrixOptions())
	must(err, "start")
	defer d.Stop()
	if w.Rank() == v {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	took := awaitFailed(ctx, w, v)
	fmt.Printf("knew after %v\n", took.Round(time.Millisecond))
	if _, err := Agree(ctx, w, 1); err != nil && !errors.Is(err, fabric.ErrProcFailed) {
		failf("agree: %v", err)
	}
	w.AckFailed(w.Size())
	if _, err := Agree(ctx, w, 1); err != nil {
		failf("agree after acknowledging: %v", err)
	}
	onlyVictim(ctx, ep, v)
	return nil
}

// TestStartKilled: Start succeeds at every survivor whether a process
// dies before its own Start or right after.
func TestStartKilled(t *testing.T) {
	for _, way := range ways(t) {
		for _, when := range []string{"before", "after"} {
			t.Run(way.name+"/"+when, func(t *testing.T) {
				const n = 6
				out, errs, st := progs.Run(t, n, "startkill", true, append([]string{"FT_TEST_WHEN=" + when}, way.env...)...)
				if st != 128+9 {
					t.Fatalf("status %d, want 137 (the victim killed)\n%s\n%s", st, out, errs)
				}
				for r := 0; r < n; r++ {
					if r != victim(n) && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
						t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
					}
				}
			})
		}
	}
}
