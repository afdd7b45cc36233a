//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

func init() { progs.Add("errrange", progErrRange) }

// progErrRange: world rank 3 dies while ranks 0 and 1 are mid-message on
// two communicators — c, with every rank, and s, without rank 3: rank 0
// waits in a receive from rank 1, and rank 1 in a long send to rank 0 no
// receive takes. FABRIC_TEST_RANGE is the error range both have. With
// "operation" neither is touched; with "group" c is revoked, s not; with
// "global" both.
func progErrRange(ctx context.Context, ep *Endpoint) error {
	const v = 3
	w := ep.World()
	me := w.Rank()
	connectAll(ctx, w)
	c, err := w.Dup(ctx)
	must(err, "dup")
	color := 0
	if me == v {
		color = Undefined
	}
	s, err := w.Split(ctx, color, 0)
	must(err, "split")
	rng := os.Getenv("FABRIC_TEST_RANGE")
	must(c.SetInfo(InfoErrorRange, rng), "set the range of c")
	if s != nil {
		must(s.SetInfo(InfoErrorRange, rng), "set the range of s")
	}
	if got, _ := c.Info(InfoErrorRange); got != rng {
		failf("Info(%s) = %q after setting %q", InfoErrorRange, got, rng)
	}
	if me == v {
		must(w.Send(ctx, nil, 0, 98), "ready")
		_, err := w.Recv(ctx, nil, 0, 97) // once the others are mid-message
		must(err, "go")
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	type inflight struct{ recv, send Request }
	mid := map[*Comm]*inflight{c: {}, s: {}}
	for _, cm := range []*Comm{c, s} {
		f := mid[cm]
		switch me {
		case 0:
			f.recv, err = cm.Irecv(make([]byte, 8), 1, 5)
		case 1:
			f.send, err = cm.Isend(make([]byte, 1<<20), 0, 6)
		}
		must(err, "start a message")
	}
	if me == 0 {
		_, err := w.Recv(ctx, nil, v, 98)
		must(err, "ready")
		must(w.Send(ctx, nil, v, 97), "go")
	}
	// Every survivor knows once its receive from the victim fails.
	if _, err := w.Recv(ctx, nil, v, 96); !errors.Is(err, ErrProcFailed) {
		failf("receive from the dead rank: %v", err)
	}
	want := map[*Comm]bool{c: rng != "operation", s: rng == "global"}
	for _, cm := range []*Comm{c, s} { // in the same order at every rank
		f := mid[cm]
		name := map[*Comm]string{c: "c (every rank)", s: "s (not the dead one)"}[cm]
		if cm.IsRevoked() != want[cm] {
			failf("%s range, %s: revoked %v", rng, name, cm.IsRevoked())
		}
		if !want[cm] {
			// Untouched: the messages complete.
			switch me {
			case 0:
				must(cm.Send(ctx, nil, 1, 7), "go ahead")
				_, err := f.recv.Wait(ctx)
				must(err, "receive on "+name)
				_, err = cm.Recv(ctx, make([]byte, 1<<20), 1, 6)
				must(err, "long receive on "+name)
			case 1:
				_, err := cm.Recv(ctx, nil, 0, 7)
				must(err, "go ahead")
				must(cm.Send(ctx, make([]byte, 8), 0, 5), "send on "+name)
				_, err = f.send.Wait(ctx)
				must(err, "long send on "+name)
			}
			continue
		}
		var r Request
		switch me {
		case 0:
			r = f.recv
		case 1:
			r = f.send
		default:
			continue
		}
		if _, err := r.Wait(ctx); !errors.Is(err, ErrRevoked) {
			failf("%s range, %s: the message under way ended with %v, want ErrRevoked", rng, name, err)
		}
	}
	// Freeing a communicator with a dead member, revoked or not, is
	// local: it never waits for anyone, and the handle is spent.
	for _, cm := range []*Comm{c, s} {
		must(cm.Free(), "free")
		if err := cm.Send(ctx, nil, 0, 1); !errors.Is(err, ErrComm) {
			failf("send on a freed communicator: %v, want ErrComm", err)
		}
	}
	return nil
}

// TestErrorRange is the table of mpi_error_range values: with a member
// failing while two healthy ranks are mid-message, operation touches
// nothing, group revokes the communicators with the dead rank, global
// every communicator.
func TestErrorRange(t *testing.T) {
	for _, rng := range []string{"operation", "group", "global"} {
		t.Run(rng, func(t *testing.T) {
			out, errs, st := runJob(t, 4, "errrange", true, "FABRIC_TEST_RANGE="+rng)
			if st != 128+9 {
				t.Fatalf("status %d, want 137 (rank 3 killed)\n%s\n%s", st, out, errs)
			}
			for r := 0; r < 3; r++ {
				if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("rank %d did not finish:\n%s\n%s", r, out, errs)
				}
			}
		})
	}
}

// TestInfoKeys: the info keys by name, their values, and what is not one.
func TestInfoKeys(t *testing.T) { runOK(t, 1, "infokeys") }

func init() {
	progs.Add("infokeys", func(ctx context.Context, ep *Endpoint) error {
		c := ep.World()
		for _, tc := range []struct {
			key, value string
			want       error
		}{
			{InfoErrorRange, "group", nil},
			{InfoErrorRange, "global", nil},
			{InfoErrorRange, "operation", nil},
			{InfoErrorRange, "everywhere", ErrInvalid},
			{InfoErrorUniform, "local", nil},
			{InfoErrorUniform, "coll", ErrNotSupported},
			{InfoErrorUniform, "create", ErrNotSupported},
			{InfoErrorUniform, "sometimes", ErrInvalid},
			{"mpi_assert_no_any_source", "true", ErrInvalid},
		} {
			err := c.SetInfo(tc.key, tc.value)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				failf("SetInfo(%q, %q) = %v, want %v", tc.key, tc.value, err, tc.want)
			}
			if got, ok := c.Info(tc.key); tc.want == nil && (!ok || got != tc.value) {
				failf("Info(%q) = %q, %v after setting %q", tc.key, got, ok, tc.value)
			}
		}
		if _, ok := c.Info("nope"); ok {
			failf("Info of an unknown key")
		}
		if err := c.SetErrorRange(ErrorRange(7)); !errors.Is(err, ErrInvalid) {
			failf("SetErrorRange(7) = %v", err)
		}
		if ErrorRange(7).String() != "ErrorRange(7)" || RangeGroup.String() != "group" || UniformColl.String() != "coll" {
			failf("names: %v %v %v", ErrorRange(7), RangeGroup, UniformColl)
		}
		return nil
	})
}
