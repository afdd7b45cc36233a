//go:build linux

package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

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

// oneSidedCounts tracks one peer's one-sided operations: how many were
// issued and how many completed, and the first failure since the last
// Flush.
type oneSidedCounts struct {
	issued, done uint64
	err          error
}

func (c *oneSidedCounts) fail(err error) {
	c.done++
	if c.err == nil {
		c.err = err
	}
}

// vOneSided is a one-sided operation in flight whose result needs a copy
// when it completes: a Get into memory not from AllocMem, or an atomic.
type vOneSided struct {
	stage  *verbs.MR
	dst    []byte
	result *uint64
	sge    [1]verbs.SGE
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
	mr, off, err := ep.mem.lookup(ep.verbs.pd, b)
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
	return ep.oneSided(ctx, peer, m, off, uint64(len(src)), func(v *verbsProvider, p *verbsPeer) (bool, error) {
		return v.rdma(p, verbs.OpRDMAWrite, m, off, src)
	})
}

// Get starts reading len(dst) bytes of peer's memory m at offset off into
// dst, which holds them once Flush(ctx, peer) returns.
func (ep *Endpoint) Get(ctx context.Context, peer int, m RemoteMem, off uint64, dst []byte) error {
	return ep.oneSided(ctx, peer, m, off, uint64(len(dst)), func(v *verbsProvider, p *verbsPeer) (bool, error) {
		return v.rdma(p, verbs.OpRDMARead, m, off, dst)
	})
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
	return ep.oneSided(ctx, peer, m, off, 8, func(v *verbsProvider, p *verbsPeer) (bool, error) {
		return v.atomic(p, m, off, wr, result)
	})
}

// oneSided checks an operation of n bytes at off in m against m's bounds
// and peer's route, and issues it, waiting for room if needed.
func (ep *Endpoint) oneSided(ctx context.Context, peer int, m RemoteMem, off, n uint64, issue func(*verbsProvider, *verbsPeer) (bool, error)) error {
	if peer < 0 || peer >= ep.size {
		return fmt.Errorf("%w: world rank %d of %d", ErrRank, peer, ep.size)
	}
	if off > m.Len || n > m.Len-off {
		return fmt.Errorf("%w: %d bytes at offset %d of %d-byte remote memory", ErrInvalid, n, off, m.Len)
	}
	e := ep.e
	return e.waitUntilErr(ctx, func() (bool, error) {
		if err := e.failed[peer]; err != nil {
			return true, e.peerError(nil, peer, err)
		}
		v := ep.verbs
		if v == nil || (peer != v.me && !v.isPeer[peer]) {
			return true, fmt.Errorf("fabric: one-sided operations to world rank %d need the verbs provider (it is reached over %q): %w", peer, ep.Provider(peer), ErrNotSupported)
		}
		p := v.oneSidedPeer(peer)
		if p == nil {
			v.connect(peer)
			return false, nil // until connected
		}
		return issue(v, p)
	})
}

// Flush waits until every one-sided operation issued to peer is complete
// at the peer (and a Get's or an atomic's result is in place), and
// returns the first error among them.
func (ep *Endpoint) Flush(ctx context.Context, peer int) error {
	if peer < 0 || peer >= ep.size {
		return fmt.Errorf("%w: world rank %d of %d", ErrRank, peer, ep.size)
	}
	e := ep.e
	return e.waitUntilErr(ctx, func() (bool, error) {
		v := ep.verbs
		if v == nil || v.oneSidedPeer(peer) == nil {
			return true, nil // nothing was ever issued to it
		}
		c := &v.oneSidedPeer(peer).oneSided
		if c.done != c.issued {
			if err := e.failed[peer]; err != nil {
				return true, e.peerError(nil, peer, err)
			}
			return false, nil
		}
		err := c.err
		c.err = nil
		return true, err
	})
}

// oneSidedCounts returns how many one-sided operations this process
// issued to peer and how many of them have completed.
func (ep *Endpoint) oneSidedCounts(peer int) (issued, completed uint64) {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	if v := ep.verbs; v != nil && peer >= 0 && peer < ep.size && v.oneSidedPeer(peer) != nil {
		c := v.oneSidedPeer(peer).oneSided
		return c.issued, c.done
	}
	return 0, 0
}

// oneSidedPeer is the queue pair one-sided operations to world rank w
// take: the peer's, or, for this process itself, a loopback pair — so that
// its own atomics are atomic with its peers' (both done by the NIC). It
// is nil while the peer is not connected.
func (v *verbsProvider) oneSidedPeer(w int) *verbsPeer {
	if w == v.me {
		return v.self
	}
	if p := v.peers[w]; p != nil && p.ready {
		return p
	}
	return nil
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

// rdma issues an RDMA write of buf (op OpRDMAWrite) or a read into buf.
// It reports false, issuing nothing, when the queue is full.
func (v *verbsProvider) rdma(p *verbsPeer, op verbs.Opcode, m RemoteMem, off uint64, buf []byte) (bool, error) {
	if len(buf) == 0 {
		return true, nil
	}
	if len(buf) > v.maxMsg {
		return true, fmt.Errorf("%w: a %d-byte one-sided operation (the port's largest message is %d)", ErrInvalid, len(buf), v.maxMsg)
	}
	mr, moff, err := v.mem.lookup(v.pd, buf)
	if err != nil {
		return true, err
	}
	i := v.newOneSided()
	if i < 0 {
		return false, nil
	}
	o := &v.oneSided[i]
	if mr == nil {
		if o.stage, err = v.getStage(len(buf)); err != nil {
			v.endOneSided(i)
			return true, err
		}
		mr, moff = o.stage, 0
		if op == verbs.OpRDMAWrite {
			copy(o.stage.Bytes(), buf)
		} else {
			o.dst = buf
		}
	}
	o.sge[0] = verbs.SGE{MR: mr, Offset: moff, Length: uint32(len(buf))}
	v.wr[0] = verbs.SendWR{ID: wrOneSided | uint64(i), Op: op, Flags: verbs.Signaled, Local: o.sge[:],
		Remote: verbs.RemoteBuf{Addr: m.Addr + off, RKey: m.Key, Len: uint64(len(buf))}}
	return v.postOneSided(p, i)
}

func (v *verbsProvider) atomic(p *verbsPeer, m RemoteMem, off uint64, wr verbs.SendWR, result *uint64) (bool, error) {
	i := v.newOneSided()
	if i < 0 {
		return false, nil
	}
	o := &v.oneSided[i]
	o.result = result
	o.sge[0] = verbs.SGE{MR: v.atoms, Offset: uint64(i * 8), Length: 8}
	wr.ID, wr.Flags, wr.Local = wrOneSided|uint64(i), verbs.Signaled, o.sge[:]
	wr.Remote = verbs.RemoteBuf{Addr: m.Addr + off, RKey: m.Key, Len: 8}
	v.wr[0] = wr
	return v.postOneSided(p, i)
}

func (v *verbsProvider) postOneSided(p *verbsPeer, i int) (bool, error) {
	if err := p.qp.PostSend(v.wr[:]...); err != nil {
		v.endOneSided(i)
		if errors.Is(err, verbs.ErrQueueFull) {
			return false, nil
		}
		return true, err
	}
	p.oneSided.issued++
	return true, nil
}

// newOneSided takes a free entry of the in-flight table, or returns -1
// when all are in use.
func (v *verbsProvider) newOneSided() int {
	if n := len(v.freeOneSided); n > 0 {
		i := v.freeOneSided[n-1]
		v.freeOneSided = v.freeOneSided[:n-1]
		return i
	}
	if len(v.oneSided) == vMaxOneSided {
		return -1
	}
	v.oneSided = append(v.oneSided, vOneSided{})
	return len(v.oneSided) - 1
}

// oneSidedDone copies entry i's result into place (unless it failed) and
// frees it.
func (v *verbsProvider) oneSidedDone(i int, ok bool) {
	o := &v.oneSided[i]
	if ok {
		if o.dst != nil {
			copy(o.dst, o.stage.Bytes())
		}
		if o.result != nil {
			*o.result = binary.NativeEndian.Uint64(v.atoms.Bytes()[i*8:])
		}
	}
	v.endOneSided(i)
}

func (v *verbsProvider) endOneSided(i int) {
	o := &v.oneSided[i]
	if o.stage != nil {
		v.putStage(o.stage)
	}
	*o = vOneSided{}
	v.freeOneSided = append(v.freeOneSided, i)
}
