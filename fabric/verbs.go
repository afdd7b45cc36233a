//go:build linux

package fabric

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/rdma"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// verbsProvider is the verbs provider (fabric/internal/rdma) as the
// engine drives it, with the port state Health reports.
type verbsProvider struct {
	*rdma.Provider
	portDown error // set while the device's port is down
	probes   bool  // SourceCompletion: probe the peers calls wait for
}

func newVerbsProvider(cfg rdma.Config, e *engine, probes bool) (*verbsProvider, error) {
	p, err := rdma.New(cfg, e, &e.mu)
	if err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	return &verbsProvider{Provider: p, probes: probes}, nil
}

func (v *verbsProvider) name() string  { return "verbs" }
func (v *verbsProvider) eagerMax() int { return rdma.Eager }
func (v *verbsProvider) send(peer int, h *wire.Header, payload []byte) bool {
	return v.Send(peer, h, payload)
}
func (v *verbsProvider) poll(e *engine, budget int) int { return v.Poll(budget, e.direct) }
func (v *verbsProvider) read(peer int, r *op, dst []byte, id, addr uint64, key uint32) (bool, error) {
	return v.Read(peer, r, dst, id, addr, key)
}
func (v *verbsProvider) takeDirect(_ *engine, w int, ctx uint32, src, tag int, buf []byte) (n, gotTag int, taken, moved bool) {
	return v.TakeDirect(w, ctx, src, tag, buf)
}
func (v *verbsProvider) probe(now time.Time, _ *engine) {
	if v.probes {
		v.Probe(now)
	}
}
func (v *verbsProvider) unstage(id uint64)    { v.Unstage(id) }
func (v *verbsProvider) closed(peer int) bool { return v.Closed(peer) }
func (v *verbsProvider) fence(w int)          { v.Fence(w) }
func (v *verbsProvider) fenceSelf()           { atomic.StoreUint64(v.FenceWord(), 1) }
func (v *verbsProvider) close() error         { return v.Close() }

// The engine as the verbs provider sees it (rdma.Engine), beside what the
// shared-memory provider sees too (shm.go).

func (e *engine) Failed(peer int) bool { return e.failed[peer] != nil }
func (e *engine) WaitedOn(in []bool)   { e.waitedOn(in) }

func (e *engine) Lost(w int, closed bool, cause error) {
	if h := e.health; !closed && h != nil && h.bye != nil {
		// A peer of this node that closed on purpose can be lost over a
		// connection before its goodbye there arrives, or over one it
		// never had (a detector's first read after its ring moved on):
		// its goodbye datagram, queued before it tore anything down,
		// says it closed.
		h.bye.drain()
		closed = h.bye.said[w]
	}
	switch {
	case closed:
		e.markFailedNow(w, fmt.Errorf("%w: world rank %d closed its endpoint (%v)", ErrClosed, w, cause))
	case errors.Is(cause, rdma.ErrNoRoute):
		e.markFailedNow(w, fmt.Errorf("%w: world rank %d: %v", ErrNoRoute, w, cause))
	case errors.Is(cause, rdma.ErrGone):
		e.markFailedNow(w, procFailed("world rank %d: %v", w, cause))
	default:
		e.markFailedNow(w, procFailed("world rank %d %v", w, cause))
	}
}
