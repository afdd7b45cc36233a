//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() { progs.Add("ftchannel", progFTChannel) }

// echo is an FTHandler that answers every "ping" with a "pong" from
// within the handler, and records what it is told.
type echo struct {
	c      *Comm
	pongs  int
	failed []int
	got    []string
}

func (h *echo) FTMessage(src, tag int, payload []byte) {
	h.got = append(h.got, fmt.Sprintf("%d:%d:%s", src, tag, payload))
	if string(payload) == "ping" {
		must(h.c.SendFT(src, tag, []byte("pong")), "answer from the handler")
	} else if string(payload) == "pong" {
		h.pongs++
	}
}

func (h *echo) FTFailed(r int) { h.failed = append(h.failed, r) }

// progFTChannel: on a revoked communicator, every rank pings every other
// on the fault-tolerance channel and gets its pongs, answered from the
// handlers; rank 1 sets its handler only after the others' pings came,
// and gets them all; then the last rank dies, and every handler is told.
func progFTChannel(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	connectAll(ctx, w)
	c, err := w.Dup(ctx)
	must(err, "dup")
	must(c.Revoke(), "revoke") // the channel does not care
	h := &echo{c: c}
	if me != 1 {
		must(c.SetFTHandler(h), "set the handler")
	}
	for r := 0; r < n; r++ {
		if r != me {
			must(c.SendFT(r, 7, []byte("ping")), "ping")
		}
	}
	if me == 1 {
		// Every ping to it and every pong for its own pings arrives
		// before there is a handler: kept.
		must(c.WaitFT(ctx, func() bool { return len(c.ft.early) == 2*(n-1) }), "wait for the early messages")
		must(c.SetFTHandler(h), "set the handler late")
	}
	must(c.WaitFT(ctx, func() bool { return h.pongs == n-1 }), "wait for the pongs")
	for _, bad := range []struct {
		what string
		err  error
		want error
	}{
		{"a second handler", c.SetFTHandler(h), ErrInvalid},
		{"a nil handler", w.SetFTHandler(nil), ErrInvalid},
		{"too long", c.SendFT(0, 1, make([]byte, FTMax+1)), ErrInvalid},
		{"a bad rank", c.SendFT(n, 1, nil), ErrRank},
		{"a bad tag", c.SendFT(0, -1, nil), ErrTag},
	} {
		if !errors.Is(bad.err, bad.want) {
			failf("%s: %v, want %v", bad.what, bad.err, bad.want)
		}
	}
	// A freed communicator's channel still answers, and what was sent on
	// it just before the free still leaves: rank 0 pings rank 1 and frees
	// at once; rank 1's pong reaches rank 0's handler all the same.
	d, err := w.Dup(ctx)
	must(err, "dup")
	hd := &echo{c: d}
	must(d.SetFTHandler(hd), "set the handler")
	switch me {
	case 0:
		must(d.SendFT(1, 9, []byte("ping")), "ping")
		must(d.Free(), "free")
		must(w.WaitFT(ctx, func() bool { return hd.pongs == 1 }), "wait for the pong on the freed communicator")
	case 1:
		must(d.WaitFT(ctx, func() bool { return len(hd.got) == 1 }), "wait for the ping")
		must(d.Free(), "free")
	default:
		must(d.Free(), "free")
	}
	// Every rank is done with the pings before the last one dies.
	must(w.Send(ctx, nil, n-1, 98), "done")
	if me == n-1 {
		for r := 0; r < n-1; r++ {
			_, err := w.Recv(ctx, nil, r, 98)
			must(err, "done")
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if me == n-2 {
		// The others that finish close their endpoints: this rank hears
		// of that first, as a slow rank may, before the failure.
		must(w.WaitFT(ctx, func() bool {
			for r := 0; r < n-2; r++ {
				if ep.e.failed[r] == nil {
					return false
				}
			}
			return true
		}), "wait for the others to close")
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The handler is told of the members that stopped too, each once.
	if err := c.WaitFT(tctx, func() bool { return slices.Contains(h.failed, n-1) }); err != nil {
		failf("wait to hear of the failure: %v (the handler was told %v)", err, h.failed)
	}
	told := slices.Clone(h.failed)
	slices.Sort(told)
	if len(slices.Compact(slices.Clone(told))) != len(told) {
		failf("the handler was told %v: a rank twice", h.failed)
	}
	for _, r := range told {
		if r != n-1 && ep.State(r) != Stopped {
			failf("the handler was told %v; rank %d is %v, not stopped", h.failed, r, ep.State(r))
		}
	}
	if me == n-2 && len(told) != n-1 {
		failf("the handler was told %v, want every other rank (the last failed, the rest stopped)", h.failed)
	}
	if err := c.SendFT(n-1, 1, nil); err != nil {
		failf("SendFT to a failed rank: %v (the message is dropped)", err)
	}
	return nil
}

// TestFTChannel: package ft's channel, over shared memory and verbs.
func TestFTChannel(t *testing.T) {
	for _, way := range []string{"shm", "verbs"} {
		t.Run(way, func(t *testing.T) {
			env := providerEnv(t, way)
			for _, n := range []int{2, 4} {
				out, errs, st := runJob(t, n, "ftchannel", true, env...)
				if st != 128+9 {
					t.Fatalf("%d ranks: status %d, want 137 (the last rank killed)\n%s\n%s", n, st, out, errs)
				}
				for r := 0; r < n-1; r++ {
					if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
						t.Fatalf("rank %d did not finish:\n%s\n%s", r, out, errs)
					}
				}
			}
		})
	}
}
