//go:build linux

package fabric

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func init() { progs.Add("comms", progComms) }

// progComms: dup, split, create and create-group give the right members
// and orders, and traffic on one communicator never matches another's.
func progComms(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me := w.Rank()
	held := []*Comm{w, ep.Self()}

	d, err := w.Dup(ctx)
	must(err, "dup")
	held = append(held, d)
	if d.contextID() == w.contextID() || d.Size() != w.Size() || d.Rank() != me {
		failf("dup: id %d (world %d), size %d, rank %d", d.contextID(), w.contextID(), d.Size(), d.Rank())
	}
	// Same tag, same peers, two communicators: each receive gets its own.
	peer := me ^ 1
	must(d.Send(ctx, []byte("dup"), peer, 5), "send on dup")
	must(w.Send(ctx, []byte("world"), peer, 5), "send on world")
	buf := make([]byte, 8)
	st, err := w.Recv(ctx, buf, peer, 5)
	if err != nil || string(buf[:st.Count]) != "world" {
		failf("world receive got %q (%v)", buf[:st.Count], err)
	}
	st, err = d.Recv(ctx, buf, peer, 5)
	if err != nil || string(buf[:st.Count]) != "dup" {
		failf("dup receive got %q (%v)", buf[:st.Count], err)
	}

	// Split by parity, keys reversing the order; rank 3 opts out.
	color := me % 2
	if me == 3 {
		color = Undefined
	}
	s, err := w.Split(ctx, color, -me)
	must(err, "split")
	switch me {
	case 3:
		if s != nil {
			failf("split with Undefined gave a communicator")
		}
	case 0, 2:
		held = append(held, s)
		if s.Size() != 2 || s.Rank() != map[int]int{2: 0, 0: 1}[me] {
			failf("split: rank %d size %d", s.Rank(), s.Size())
		}
		// The split communicator works, in its own ranks.
		got := make([]byte, 1)
		if _, err := s.Sendrecv(ctx, []byte{byte(me)}, 1-s.Rank(), 0, got, 1-s.Rank(), 0); err != nil || int(got[0]) != 2-me {
			failf("split sendrecv: %v, got %d", err, got[0])
		}
	case 1:
		held = append(held, s)
		if s.Size() != 1 || s.Rank() != 0 {
			failf("split of one: rank %d size %d", s.Rank(), s.Size())
		}
	}

	// Create over the world for {0, 2}.
	g, err := w.Group().Incl([]int{2, 0})
	must(err, "incl")
	c, err := w.Create(ctx, g)
	must(err, "create")
	if (c != nil) != (me == 0 || me == 2) {
		failf("create: member %v, got %v", me == 0 || me == 2, c)
	}
	if c != nil {
		held = append(held, c)
		if c.Size() != 2 || c.Rank() != map[int]int{2: 0, 0: 1}[me] {
			failf("create: rank %d size %d", c.Rank(), c.Size())
		}
	}

	// CreateGroup among {1, 2, 3} only; rank 0 takes no part.
	if me != 0 {
		g, err := w.Group().Excl([]int{0})
		must(err, "excl")
		cg, err := w.CreateGroup(ctx, g, 7)
		must(err, "create group")
		held = append(held, cg)
		if cg.Size() != 3 || cg.Rank() != me-1 {
			failf("create group: rank %d size %d", cg.Rank(), cg.Size())
		}
		tr, err := TranslateRanks(cg.Group(), []int{0, 1, 2}, w.Group())
		if err != nil || !slices.Equal(tr, []int{1, 2, 3}) {
			failf("translate: %v %v", tr, err)
		}
	} else {
		if _, err := w.CreateGroup(ctx, WorldGroup(1).excludeForTest(), 1); !errors.Is(err, ErrGroup) {
			failf("CreateGroup with an empty group: %v", err)
		}
	}

	// No two communicators this process holds share a context id.
	seen := map[uint32]bool{}
	for _, h := range held {
		if seen[h.contextID()] {
			failf("context id %d is used twice here", h.contextID())
		}
		seen[h.contextID()] = true
	}

	// Freed ids come back: a hundred dup/free rounds stay in a few ids.
	for i := 0; i < 100; i++ {
		x, err := w.Dup(ctx)
		must(err, "dup")
		if x.contextID() > 16 {
			failf("round %d: context id %d — freed ids are not reused", i, x.contextID())
		}
		must(x.Free(), "free")
	}
	return nil
}

func (g Group) excludeForTest() Group { return Difference(g, g) }

func TestCommunicators(t *testing.T) { runOK(t, 4, "comms") }

func init() { progs.Add("stale", progStale) }

// TestStaleMessage: a message left unreceived on a communicator — as a
// failure leaves one — does not match the traffic of the next
// communicator that reuses its context id, and the unexpected queue
// does not keep it.
func TestStaleMessage(t *testing.T) { runOK(t, 2, "stale") }

func progStale(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me := w.Rank()
	old, err := w.Dup(ctx)
	must(err, "dup")
	if me == 0 {
		must(old.Send(ctx, []byte("stale"), 1, 5), "send on the old communicator")
	}
	pairSync(ctx, w) // (the stale message is here before rank 1 frees)
	id, oldBase := old.contextID(), old.ctxBase
	must(old.Free(), "free")
	pairSync(ctx, w)
	fresh, err := w.Dup(ctx)
	must(err, "dup")
	if fresh.contextID() != id {
		failf("the new communicator has context id %d, not the freed %d: the test needs it reused", fresh.contextID(), id)
	}
	if me == 1 {
		ep.e.mu.Lock()
		n := 0
		for u := ep.e.unexp.head; u != nil; u = u.next {
			// (Only the freed communicator's: rank 0 may already have
			// sent on the new one, or on w.)
			if u.h.Ctx&^3 == oldBase {
				n++
			}
		}
		ep.e.mu.Unlock()
		if n != 0 {
			failf("%d unexpected messages kept after their communicator was freed", n)
		}
	}
	if me == 0 {
		must(fresh.Send(ctx, []byte("fresh"), 1, 5), "send on the new communicator")
	} else {
		b := make([]byte, 8)
		st, err := fresh.Recv(ctx, b, 0, 5)
		must(err, "receive on the new communicator")
		if got := string(b[:st.Count]); got != "fresh" {
			failf("received %q on the new communicator", got)
		}
	}
	return fresh.Free()
}

// pairSync returns once both of w's two ranks have called it.
func pairSync(ctx context.Context, w *Comm) {
	peer := 1 - w.Rank()
	r, err := w.Irecv(nil, peer, 77)
	must(err, "irecv")
	must(w.Send(ctx, nil, peer, 77), "send")
	_, err = r.Wait(ctx)
	must(err, "wait")
}
