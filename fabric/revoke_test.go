//go:build linux

package fabric

import (
	"context"
	"errors"
	"math/bits"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

func init() {
	progs.Add("revoke", progRevoke)
	progs.Add("revokestale", progRevokeStale)
	progs.Add("revokedies", progRevokeDies)
	progs.BeforeInit("revokedies", func() { dieMidBroadcast(0, -1) })
	// Two victims: rank 0, and rank 1, the first it tells, once the
	// first rank 1 tells (rank 2) knows.
	progs.Add("revokedies2", progRevokeDies)
	progs.BeforeInit("revokedies2", func() { dieMidBroadcast(0, -1); dieMidBroadcast(1, -1) })
}

// connectAll has every pair of ranks of w exchange a message, so that
// every connection exists.
func connectAll(ctx context.Context, w *Comm) {
	me, n := w.Rank(), w.Size()
	for d := 1; d < n; d++ {
		_, err := w.Sendrecv(ctx, []byte{byte(me)}, (me+d)%n, 3, make([]byte, 1), (me-d+n)%n, 3)
		must(err, "all pairs")
	}
}

// unexpectedOn counts the messages of c nobody has received.
func unexpectedOn(c *Comm) int {
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for u := e.unexp.head; u != nil; u = u.next {
		if u.h.Ctx&^3 == c.ctxBase {
			n++
		}
	}
	return n
}

// progRevoke: rank 0 revokes a communicator while every other rank waits
// on it — in a receive from anyone, in a rendezvous send to rank 0 that
// rank 0 never receives — and rank 0 holds eager messages of it that it
// never received. Every wait ends with ErrRevoked at every rank, the
// notice having come at most ⌈log2 n⌉ hops; later operations raise it at
// once; nothing of the communicator is left queued; the world still
// carries traffic, a lot of it (no credit was lost).
func progRevoke(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	connectAll(ctx, w)
	c, err := w.Dup(ctx)
	must(err, "dup")
	if me != 0 {
		// Unreceived at rank 0: an eager message, and from rank 1 (a
		// neighbour of rank 0 in the broadcast, which hears of the revoke
		// before the refusal) a rendezvous one whose sender waits for it
		// to be read.
		must(c.Send(ctx, []byte{1}, 0, 5), "eager send")
		var big Request
		if me == 1 {
			big, err = c.Isend(make([]byte, 1<<20), 0, 6)
			must(err, "isend")
		}
		pending, err := c.Irecv(make([]byte, 8), AnySource, 7)
		must(err, "irecv")
		must(w.Send(ctx, nil, 0, 98), "ready")
		if _, err := pending.Wait(ctx); !errors.Is(err, ErrRevoked) {
			failf("pending receive: %v, want ErrRevoked", err)
		}
		if _, err := big.Wait(ctx); me == 1 && !errors.Is(err, ErrRevoked) {
			failf("rendezvous send nobody received: %v, want ErrRevoked", err)
		}
	} else {
		for r := 1; r < n; r++ {
			_, err := w.Recv(ctx, nil, r, 98)
			must(err, "ready")
		}
		// Everything of c has arrived once the others are ready.
		for unexpectedOn(c) < n {
			_, _, err := w.Iprobe(AnySource, 12345)
			must(err, "progress")
		}
		if c.IsRevoked() {
			failf("revoked before Revoke")
		}
		must(c.Revoke(), "revoke")
		if !c.IsRevoked() {
			failf("not revoked right after Revoke")
		}
		must(c.Revoke(), "revoke again")
	}
	if !c.IsRevoked() {
		failf("not revoked")
	}
	if u := unexpectedOn(c); u != 0 {
		failf("%d messages of the revoked communicator still queued", u)
	}
	for _, op := range []struct {
		what string
		err  error
	}{
		{"send", c.Send(ctx, []byte{1}, (me+1)%n, 1)},
		{"long send", c.Send(ctx, make([]byte, 1<<20), (me+1)%n, 1)},
		{"receive", func() error { _, err := c.Recv(ctx, nil, (me+1)%n, 1); return err }()},
		{"receive from anyone", func() error { _, err := c.Recv(ctx, nil, AnySource, 1); return err }()},
		{"probe", func() error { _, err := c.Probe(ctx, AnySource, 1); return err }()},
		{"iprobe", func() error { _, _, err := c.Iprobe(AnySource, 1); return err }()},
		{"dup", func() error { _, err := c.Dup(ctx); return err }()},
		{"schedule", func() error {
			s, err := c.NewSchedule()
			if err != nil {
				return err
			}
			s.Send([]byte{1}, (me+1)%n)
			s.Recv(make([]byte, 1), (me-1+n)%n)
			r, err := s.Start()
			if err != nil {
				return err
			}
			_, err = r.Wait(ctx)
			return err
		}()},
	} {
		if !errors.Is(op.err, ErrRevoked) {
			failf("%s on the revoked communicator: %v, want ErrRevoked", op.what, op.err)
		}
	}
	// The world is untouched, and every credit came back.
	for i := 0; i < 2000; i++ {
		_, err := w.Sendrecv(ctx, []byte{byte(i)}, (me+1)%n, 4, make([]byte, 1), (me-1+n)%n, 4)
		must(err, "world traffic after the revoke")
	}
	// Every rank sent the notice on before this exchange, and a notice
	// comes before a later message between the same two ranks: every
	// notice has arrived. The first to arrive may have come the long way
	// (a process reads its peers' channels in turn); the shortest is at
	// most ⌈log2 n⌉ hops.
	connectAll(ctx, w)
	c.e.mu.Lock()
	hops := c.revokeHops
	c.e.mu.Unlock()
	if bound := bits.Len(uint(n - 1)); hops < 0 || hops > bound || (hops == 0) != (me == 0) {
		failf("the revoke came %d hops at the fewest (bound %d)", hops, bound)
	}
	must(c.Free(), "free the revoked communicator")
	return nil
}

func TestRevoke(t *testing.T) {
	for _, way := range []string{"shm", "verbs"} {
		t.Run(way, func(t *testing.T) {
			env := providerEnv(t, way)
			for _, n := range []int{2, 4, 8} {
				runOK(t, n, "revoke", env...)
			}
		})
	}
}

// progRevokeStale: a revoke notice names a communicator by context id
// and generation. One for a communicator freed since, whose id a newer
// one reuses, revokes nothing; one for a communicator not made here yet
// waits for it.
func progRevokeStale(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	old, err := w.Dup(ctx)
	must(err, "dup")
	stale := wire.Header{Kind: wire.Notice, Tag: wire.NoticeRevoked, Ctx: old.id, ID: old.gen, Size: 1}
	must(old.Free(), "free")
	c, err := w.Dup(ctx)
	must(err, "dup again")
	if c.id != old.id || c.gen <= old.gen {
		failf("the new communicator is (%d, %d), the freed one (%d, %d): want its id reused, a later generation", c.id, c.gen, old.id, old.gen)
	}
	e := ep.e
	e.mu.Lock()
	e.revokeNotice(&stale)
	early := wire.Header{Kind: wire.Notice, Tag: wire.NoticeRevoked, Ctx: c.id, ID: c.gen + 1, Size: 2}
	e.revokeNotice(&early)
	e.mu.Unlock()
	if c.IsRevoked() {
		failf("a stale notice revoked a newer communicator with the same id")
	}
	must(c.Free(), "free")
	next, err := w.Dup(ctx)
	must(err, "dup a third time")
	if next.gen != c.gen+1 || !next.IsRevoked() {
		failf("(%d, %d): a notice that came before the communicator was made did not revoke it", next.id, next.gen)
	}
	return next.Free()
}

func TestRevokeStale(t *testing.T) { runOK(t, 1, "revokestale") }

// progRevokeDies: the rank that revokes dies once the first neighbour it
// told has the notice; every survivor's receive on the communicator still
// ends with ErrRevoked.
func progRevokeDies(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	connectAll(ctx, w)
	c, err := w.Dup(ctx)
	must(err, "dup")
	if me == 0 {
		for r := 1; r < n; r++ {
			_, err := w.Recv(ctx, nil, r, 98)
			must(err, "ready")
		}
		c.Revoke()
		failf("alive after revoking")
	}
	pending, err := c.Irecv(make([]byte, 1), 0, 7)
	must(err, "irecv")
	must(w.Send(ctx, nil, 0, 98), "ready")
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := pending.Wait(ctx); !errors.Is(err, ErrRevoked) {
		failf("receive on the revoked communicator: %v, want ErrRevoked", err)
	}
	leaveMark(me)
	return nil
}

// TestRevokeInitiatorDies: with every failure source off, the revoking
// rank dies mid-broadcast — alone, and with the first rank it told, which
// dies having told one other; the revoke still reaches every survivor.
func TestRevokeInitiatorDies(t *testing.T) {
	t.Run("one", func(t *testing.T) { testInitiatorDies(t, "revokedies", []int{0}) })
	t.Run("two", func(t *testing.T) { testInitiatorDies(t, "revokedies2", []int{0, 1}) })
}
