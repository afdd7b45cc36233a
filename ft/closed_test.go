//go:build linux

package ft

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

func init() { progs.Add("closedagree", progClosedAgree) }

// progClosedAgree: rank 1 closes its endpoint and exits instead of
// entering an agreement — what a Go program does that returns an error
// with a deferred Close. It is stopped, not failed; the agreement does
// not wait for it: it raises ErrProcFailed at every other member, as for
// a failed member (it sent nothing more), until they acknowledge it, and a
// shrink leaves it out.
// (The agreement used to wait for it until the caller's context ended.)
func progClosedAgree(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	must(collectives.Barrier(ctx, w), "barrier")
	if w.Rank() == 1 {
		must(ep.Close(), "close")
		return nil
	}
	// The bound only turns a wait into a failure: the exit is seen
	// within milliseconds of it (pidfd, goodbye).
	actx, cancel := context.WithTimeout(ctx, 60*time.Second)
	_, err := Agree(actx, w, 1)
	cancel()
	if !errors.Is(err, fabric.ErrProcFailed) || !strings.Contains(err.Error(), "closed: world ranks [1]") {
		failf("agreement with rank 1 closed: %v, want ErrProcFailed naming rank 1 as closed", err)
	}
	if s := ep.State(1); s != fabric.Stopped || len(ep.Failed()) != 0 {
		failf("rank 1 closed and is %v; known failed %v", s, ep.Failed())
	}
	// MPI 4.1 Example 16.3's loop — acknowledge, agree, until an
	// agreement succeeds — ends: AckAllFailed acknowledges the closed
	// member. (It used to raise until the context ended.)
	actx, cancel = context.WithTimeout(ctx, 60*time.Second)
	for {
		w.AckAllFailed()
		v, err := Agree(actx, w, 1)
		if err == nil {
			if v != 1 {
				failf("agreement after the acknowledgement: %d, want 1", v)
			}
			break
		}
		if !errors.Is(err, fabric.ErrProcFailed) {
			failf("acknowledge and agree with rank 1 closed: %v", err)
		}
	}
	cancel()
	if got := w.AckedClosed(); !slices.Equal(got, []int{1}) {
		failf("acknowledged closed %v, want [1]", got)
	}
	s, err := Shrink(ctx, w)
	must(err, "shrink")
	defer s.Free()
	if got := s.Group().Members(); !slices.Equal(got, []int{0, 2, 3}) {
		failf("shrink kept world ranks %v, want [0 2 3]", got)
	}
	v, err := Agree(ctx, s, 1)
	must(err, "agreement after the shrink")
	if v != 1 {
		failf("agreement after the shrink: %d, want 1", v)
	}
	return nil
}

func TestClosedAgree(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) { progs.OK(t, 4, "closedagree", way.env...) })
	}
}
