//go:build linux

package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rivet-hpc/rivet/fabric/internal/rdma"
	"github.com/rivet-hpc/rivet/verbs"
)

// One-sided primitives: the building blocks of the RMA layer. A process
// exposes memory from AllocMem and hands the RemoteMem that describes it
// to its peers (with any collective or message); they then read, write
// and update it with RDMA, without the exposing process taking part.
// Operations are nonblocking: each is issued to the NIC, and Flush waits
// until every operation to a peer is complete at the peer.
//
// They run over the verbs provider; a peer reached otherwise gets an
// error wrapping ErrNotSupported (RIVET_PROVIDER=verbs reaches every
// peer, including those on this node, over verbs).

// RemoteMem describes memory a process exposed: its address, length and
// the key that grants access. It is plain data, RemoteMemSize bytes in
// binary form, for sending to peers.
type RemoteMem struct {
	Addr uint64
	Len  uint64
	Key  uint32
}

// RemoteMemSize is the length of a RemoteMem's binary form.
const RemoteMemSize = 20

// AppendBinary appends m's binary form to b.
func (m RemoteMem) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint64(b, m.Addr)
	b = binary.LittleEndian.AppendUint64(b, m.Len)
	return binary.LittleEndian.AppendUint32(b, m.Key), nil
}

// MarshalBinary returns m's binary form.
func (m RemoteMem) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

// at is the n bytes at offset off of m, as the NIC addresses them.
func (m RemoteMem) at(off uint64, n int) verbs.RemoteBuf {
	return verbs.RemoteBuf{Addr: m.Addr + off, RKey: m.Key, Len: uint64(n)}
}

// UnmarshalBinary sets m from its binary form.
func (m *RemoteMem) UnmarshalBinary(b []byte) error {
	if len(b) != RemoteMemSize {
		return fmt.Errorf("%w: a %d-byte RemoteMem (want %d)", ErrInvalid, len(b), RemoteMemSize)
	}
	m.Addr = binary.LittleEndian.Uint64(b)
	m.Len = binary.LittleEndian.Uint64(b[8:])
	m.Key = binary.LittleEndian.Uint32(b[16:])
	return nil
}

// Expose makes b, memory from AllocMem, available to peers' one-sided
// operations and returns its description for them. It stays exposed
// until FreeMem.
func (ep *Endpoint) Expose(b []byte) (RemoteMem, error) {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	if ep.verbs == nil {
		return RemoteMem{}, fmt.Errorf("fabric: Expose: one-sided operations need the verbs provider, which this endpoint does not use: %w", ErrNotSupported)
	}
	mr, off, err := ep.mem.Lookup(ep.verbs.PD(), b)
	if err != nil {
		return RemoteMem{}, err
	}
	if mr == nil {
		return RemoteMem{}, fmt.Errorf("%w: Expose: memory not from AllocMem (or empty)", ErrInvalid)
	}
	return RemoteMem{Addr: mr.Addr() + off, Len: uint64(len(b)), Key: mr.RKey()}, nil
}

// Put starts writing src to the memory m of peer (a world rank, as in
// every one-sided call) at offset off. src must not change until
// Flush(ctx, peer) returns. It waits (honouring ctx) only if
// the queue to the peer is full.
func (ep *Endpoint) Put(ctx context.Context, peer int, m RemoteMem, off uint64, src []byte) error {
	return ep.oneSided(ctx, peer, m, off, uint64(len(src)), func(v *verbsProvider) (bool, error) {
		return v.RDMA(peer, verbs.OpRDMAWrite, m.at(off, len(src)), src)
	})
}

// Get starts reading len(dst) bytes of peer's memory m at offset off into
// dst, which holds them once Flush(ctx, peer) returns.
func (ep *Endpoint) Get(ctx context.Context, peer int, m RemoteMem, off uint64, dst []byte) error {
	if err := ep.checkRemote(peer, m, off, uint64(len(dst))); err != nil {
		return err
	}
	// A read per ReadChunk: see rdma.ReadChunk.
	chunk := max(len(dst), 1)
	if v := ep.verbs; v != nil && v.ReadChunk() > 0 {
		chunk = v.ReadChunk()
	}
	for lo := 0; lo == 0 || lo < len(dst); lo += chunk {
		part := dst[lo:min(lo+chunk, len(dst))]
		err := ep.oneSided(ctx, peer, m, off+uint64(lo), uint64(len(part)), func(v *verbsProvider) (bool, error) {
			return v.RDMA(peer, verbs.OpRDMARead, m.at(off+uint64(lo), len(part)), part)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// CompareAndSwap starts an atomic compare-and-swap of the 8-byte word at
// offset off of peer's memory m: if it holds old, it becomes new. The
// word's previous value is in *result once Flush(ctx, peer) returns. The
// word must be 8-byte aligned.
func (ep *Endpoint) CompareAndSwap(ctx context.Context, peer int, m RemoteMem, off, old, new uint64, result *uint64) error {
	return ep.atomic(ctx, peer, m, off, verbs.SendWR{Op: verbs.OpCompareSwap, CompareAdd: old, Swap: new}, result)
}

// FetchAndAdd starts an atomic add of delta to the 8-byte word at offset
// off of peer's memory m; the word's previous value is in *result once
// Flush(ctx, peer) returns. The word must be 8-byte aligned.
func (ep *Endpoint) FetchAndAdd(ctx context.Context, peer int, m RemoteMem, off, delta uint64, result *uint64) error {
	return ep.atomic(ctx, peer, m, off, verbs.SendWR{Op: verbs.OpFetchAdd, CompareAdd: delta}, result)
}

func (ep *Endpoint) atomic(ctx context.Context, peer int, m RemoteMem, off uint64, wr verbs.SendWR, result *uint64) error {
	if result == nil {
		return fmt.Errorf("%w: %s without a result", ErrInvalid, wr.Op)
	}
	if (m.Addr+off)%8 != 0 {
		return fmt.Errorf("%w: %s at %#x, which is not 8-byte aligned", ErrInvalid, wr.Op, m.Addr+off)
	}
	return ep.oneSided(ctx, peer, m, off, 8, func(v *verbsProvider) (bool, error) {
		return v.Atomic(peer, wr, m.at(off, 8), result)
	})
}

// checkRemote checks an operation of n bytes at off in m of peer.
func (ep *Endpoint) checkRemote(peer int, m RemoteMem, off, n uint64) error {
	if peer < 0 || peer >= ep.size {
		return fmt.Errorf("%w: world rank %d of %d", ErrRank, peer, ep.size)
	}
	if off > m.Len || n > m.Len-off {
		return fmt.Errorf("%w: %d bytes at offset %d of %d-byte remote memory", ErrInvalid, n, off, m.Len)
	}
	return nil
}

// oneSided checks an operation of n bytes at off in m against m's bounds
// and peer's route, and issues it, waiting for room if needed. The first
// try is made directly: only a full queue or a peer not yet connected
// takes the general wait.
func (ep *Endpoint) oneSided(ctx context.Context, peer int, m RemoteMem, off, n uint64, issue func(*verbsProvider) (bool, error)) error {
	if err := ep.checkRemote(peer, m, off, n); err != nil {
		return err
	}
	e := ep.e
	e.mu.Lock()
	done, err := ep.tryOneSided(peer, issue)
	e.mu.Unlock()
	if done {
		return err
	}
	return e.waitUntilErr(ctx, func() (bool, error) { return ep.tryOneSided(peer, issue) })
}

// tryOneSided issues an operation to peer with issue, if it can; with
// e.mu held.
func (ep *Endpoint) tryOneSided(peer int, issue func(*verbsProvider) (bool, error)) (bool, error) {
	e := ep.e
	if err := e.failed[peer]; err != nil {
		return true, e.peerError(nil, peer, err)
	}
	v := ep.verbs
	if v == nil || !v.Reaches(peer) {
		return true, fmt.Errorf("fabric: one-sided operations to world rank %d need the verbs provider (it is reached over %q): %w", peer, ep.Provider(peer), ErrNotSupported)
	}
	done, err := issue(v)
	if errors.Is(err, rdma.ErrTooLong) {
		err = fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return done, err
}

// Flush waits until every one-sided operation issued to peer is complete
// at the peer (and a Get's or an atomic's result is in place), and
// returns the first error among them.
//
// Its wait looks at the queue that one-sided completions arrive on, and
// makes general progress (messages, failure notices) every 16th look:
// the completion of an operation is then one poll of that queue, not a
// round of every provider.
func (ep *Endpoint) Flush(ctx context.Context, peer int) error {
	if peer < 0 || peer >= ep.size {
		return fmt.Errorf("%w: world rank %d of %d", ErrRank, peer, ep.size)
	}
	e := ep.e
	w := waiter{e: e, ctx: ctx}
	for {
		e.mu.Lock()
		if v := ep.verbs; v != nil && w.i&15 != 15 {
			w.note(v.PollOneSided())
		} else {
			w.round()
		}
		if done, err := ep.flushed(peer); done {
			e.mu.Unlock()
			return err
		}
		if err := e.endRound(&w); err != nil {
			return err
		}
	}
}

// flushed reports whether every one-sided operation to peer completed,
// with the first error among them; with e.mu held. A completion error
// is reported only after a general progress round, which records the
// failure of the peer that the error may reveal.
func (ep *Endpoint) flushed(peer int) (bool, error) {
	e := ep.e
	var c *rdma.Counts
	if v := ep.verbs; v != nil {
		c = v.OneSided(peer)
	}
	if c == nil {
		return true, nil // nothing was ever issued to it
	}
	if c.Done != c.Issued {
		if err := e.failed[peer]; err != nil {
			return true, e.peerError(nil, peer, err)
		}
		return false, nil
	}
	if c.Err == nil {
		return true, nil
	}
	e.progress() // (provider failures are handled last in a round)
	err := c.Err
	c.Err = nil
	if f := e.failed[peer]; f != nil {
		// The completion error broke the connection, and the poll
		// that found it recorded the peer as failed (a dead peer's
		// NIC may answer with a remote access error rather than
		// not at all): report it as an operation involving a
		// failed peer does.
		return true, e.peerError(nil, peer, f)
	}
	return true, err
}

// oneSidedCounts returns how many one-sided operations this process
// issued to peer and how many of them have completed.
func (ep *Endpoint) oneSidedCounts(peer int) (issued, completed uint64) {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	if v := ep.verbs; v != nil && peer >= 0 && peer < ep.size {
		if c := v.OneSided(peer); c != nil {
			return c.Issued, c.Done
		}
	}
	return 0, 0
}

// waitUntilErr makes progress until f, called with e.mu held, reports
// done; it returns f's error, or ctx's. f is not called again once done.
func (e *engine) waitUntilErr(ctx context.Context, f func() (bool, error)) error {
	var err error
	done := false
	werr := e.waitUntil(ctx, func() bool {
		if !done {
			done, err = f()
		}
		return done
	})
	if werr != nil {
		return werr
	}
	return err
}
