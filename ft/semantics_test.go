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

func init() { progs.Add("semantics", progSemantics) }

// progSemantics: ULFM's notification semantics (MPI 4.1 §16.2.2–16.2.3),
// case by case, after world rank 3 of 4 is killed. Rank 0 runs the table
// with rank 1 as a live partner; every survivor runs the collective.
func progSemantics(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me := w.Rank()
	must(collectives.Barrier(ctx, w), "barrier")
	buf := make([]byte, 8)
	switch me {
	case 3:
		// Once every survivor is out of the barrier (its ready), and rank
		// 0 is about to wait in a receive from AnySource.
		for _, r := range []int{1, 2, 0} {
			_, err := w.Recv(ctx, buf, r, 4)
			must(err, "ready")
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case 1, 2:
		must(w.Send(ctx, nil, 3, 4), "ready")
	case 0:
		// A blocking receive from AnySource under way when a member
		// fails raises ErrProcFailed, not pending: it is withdrawn.
		must(w.Send(ctx, nil, 3, 4), "the word to die")
		if _, err := w.Recv(ctx, buf, fabric.AnySource, 5); !isFailed(err, 3) {
			failf("blocking receive from AnySource when a member fails: %v", err)
		}
	}
	// Every survivor learns of it; a receive from it is the first
	// operation to say so.
	if _, err := w.Recv(ctx, buf, 3, 1); !isFailed(err, 3) {
		failf("receive from the killed rank: %v", err)
	}
	if g := w.GetFailed(); g.Size() != 1 {
		failf("GetFailed has %d members, want 1", g.Size())
	} else if r, _ := g.WorldRank(0); r != 3 {
		failf("GetFailed names world rank %d, want 3", r)
	}
	switch me {
	case 0:
		table(ctx, w)
	case 1:
		// Rank 0's live partner: one message when told, two more when
		// told again.
		_, err := w.Recv(ctx, buf, 0, 76)
		must(err, "go")
		must(w.Send(ctx, []byte("pending"), 0, 77), "send 77")
		_, err = w.Recv(ctx, buf, 0, 76)
		must(err, "go again")
		must(w.Send(ctx, []byte("acked"), 0, 78), "send 78")
		must(w.Send(ctx, []byte("acked"), 0, 79), "send 79")
		got := make([]byte, 1)
		_, err = w.Sendrecv(ctx, []byte{1}, 0, 80, got, 0, 80)
		must(err, "sendrecv between live ranks")
	}
	// A collective with a failed member raises ErrProcFailed (at every
	// survivor here: a barrier depends on every member).
	if err := collectives.Barrier(ctx, w); !errors.Is(err, fabric.ErrProcFailed) {
		failf("barrier with a failed member: %v", err)
	}
	return nil
}

// isFailed reports whether err is ErrProcFailed (not pending) naming
// world rank w.
func isFailed(err error, w int) bool {
	var pe *fabric.PeerError
	return errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrProcFailedPending) &&
		errors.As(err, &pe) && pe.WorldRank == w
}

func table(ctx context.Context, w *fabric.Comm) {
	buf := make([]byte, 8)
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"send to the failed rank", func() error { return w.Send(ctx, buf, 3, 2) }},
		{"receive from the failed rank", func() error { _, err := w.Recv(ctx, buf, 3, 2); return err }},
		{"isend to the failed rank, wait", func() error { return completes(ctx)(w.Isend(buf, 3, 2)) }},
		{"irecv from the failed rank, wait", func() error { return completes(ctx)(w.Irecv(buf, 3, 2)) }},
		{"probe the failed rank", func() error { _, err := w.Probe(ctx, 3, 2); return err }},
		{"iprobe the failed rank", func() error { _, _, err := w.Iprobe(3, 2); return err }},
		{"blocking receive from AnySource", func() error { _, err := w.Recv(ctx, buf, fabric.AnySource, 2); return err }},
		{"probe AnySource", func() error { _, err := w.Probe(ctx, fabric.AnySource, 2); return err }},
		{"iprobe AnySource", func() error { _, _, err := w.Iprobe(fabric.AnySource, 2); return err }},
	} {
		if err := c.run(); !isFailed(err, 3) {
			failf("%s: %v, want ErrProcFailed naming world rank 3", c.name, err)
		}
	}

	// A nonblocking receive from AnySource raises ErrProcFailedPending
	// and stays active and matchable: a live rank's message completes it.
	r, err := w.Irecv(buf, fabric.AnySource, 77)
	must(err, "irecv AnySource")
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := r.Wait(wctx); !errors.Is(err, fabric.ErrProcFailedPending) || r.IsNull() {
		failf("irecv from AnySource: %v (null %v), want ErrProcFailedPending and an active request", err, r.IsNull())
	}
	must(w.Send(ctx, nil, 1, 76), "go")
	for t0 := time.Now(); ; time.Sleep(time.Millisecond) {
		st, err := r.Wait(ctx)
		if err == nil {
			if st.Source != 1 || string(buf[:st.Count]) != "pending" {
				failf("the pending receive matched %+v %q", st, buf[:st.Count])
			}
			break
		}
		if !errors.Is(err, fabric.ErrProcFailedPending) || time.Since(t0) > 30*time.Second {
			failf("the pending receive: %v", err)
		}
	}

	// Acknowledged, AnySource works again.
	if n := w.AckFailed(0); n != 0 {
		failf("AckFailed(0) = %d before any acknowledgement", n)
	}
	if n := w.AckAllFailed(); n != 1 {
		failf("AckAllFailed() = %d, want 1 (one failure known)", n)
	}
	if n := w.AckFailed(0); n != 1 {
		failf("AckFailed(0) = %d after acknowledging, want 1", n)
	}
	must(w.Send(ctx, nil, 1, 76), "go again")
	st, err := w.Recv(ctx, buf, fabric.AnySource, 78)
	if err != nil || st.Source != 1 {
		failf("receive from AnySource after AckFailed: %+v %v", st, err)
	}
	r, err = w.Irecv(buf, fabric.AnySource, 79)
	must(err, "irecv AnySource after AckFailed")
	if st, err := r.Wait(ctx); err != nil || st.Source != 1 {
		failf("irecv from AnySource after AckFailed: %+v %v", st, err)
	}
	// An operation that does not involve the failed rank never raises.
	got := make([]byte, 1)
	_, err = w.Sendrecv(ctx, []byte{0}, 1, 80, got, 1, 80)
	must(err, "sendrecv between live ranks")
}

// completes returns a check of a nonblocking operation: its initiation
// raises nothing (§16.2), and its wait's error is returned with the
// request completed (null).
func completes(ctx context.Context) func(fabric.Request, error) error {
	return func(r fabric.Request, err error) error {
		if err != nil {
			return fmt.Errorf("initiation raised: %w", err)
		}
		_, err = r.Wait(ctx)
		if !r.IsNull() {
			return errors.New("the request is still active")
		}
		return err
	}
}

func TestSemantics(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			out, errs, st := progs.Run(t, 4, "semantics", true, way.env...)
			if st != 128+9 {
				t.Fatalf("status %d, want 137 (rank 3 killed)\n%s\n%s", st, out, errs)
			}
			for r := 0; r < 3; r++ {
				if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
				}
			}
		})
	}
}
