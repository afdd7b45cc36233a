//go:build linux

package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rivet-hpc/rivet/verbs"
)

// One-sided operations: RDMA writes, reads and atomics on a peer's
// exposed memory, issued on the peer's queue pair (or, for this process's
// own memory, the loopback pair, so that its atomics are atomic with its
// peers': the NIC does both). Each is signaled; Counts tracks a peer's,
// and the fabric's Flush waits on them.

// Counts tracks one peer's one-sided operations: how many were issued and
// how many completed, and the first failure since the caller last cleared
// Err.
type Counts struct {
	Issued, Done uint64
	Err          error
}

func (c *Counts) fail(err error) {
	c.Done++
	if c.Err == nil {
		c.Err = err
	}
}

// inflight is a one-sided operation in flight: the queue pair whose
// counts its completion updates, and what the completion must copy — a
// read into memory the registry does not know, or an atomic's result.
type inflight struct {
	link   *link // the queue pair it was issued on
	stage  *verbs.MR
	dst    []byte
	result *uint64
	sge    [1]verbs.SGE
}

// Reaches reports whether one-sided operations to world rank w go
// through this provider: w is a peer of it, or this process.
func (v *Provider) Reaches(w int) bool { return w == v.me || v.isPeer[w] }

// OneSided returns world rank w's one-sided counts, nil while no queue
// pair for w is ready (then nothing was issued to it).
func (v *Provider) OneSided(w int) *Counts {
	if p := v.oneSidedLink(w); p != nil {
		return &p.oneSided
	}
	return nil
}

// oneSidedLink is the queue pair one-sided operations to world rank w
// take: the peer's, or, for this process itself, the loopback pair. It is
// nil while the peer is not connected.
func (v *Provider) oneSidedLink(w int) *link {
	if w == v.me {
		return v.self
	}
	if p := v.peers[w]; p != nil && p.ready {
		return p
	}
	return nil
}

// RDMA issues an RDMA write of buf to remote (op OpRDMAWrite) or a read
// of remote into buf (OpRDMARead) for world rank w. It reports false,
// issuing nothing, when it must be tried again: the queue is full, or w
// is not connected yet (it starts the connection).
func (v *Provider) RDMA(w int, op verbs.Opcode, remote verbs.RemoteBuf, buf []byte) (bool, error) {
	p := v.oneSidedLink(w)
	if p == nil {
		v.Connect(w)
		return false, nil
	}
	if len(buf) == 0 {
		return true, nil
	}
	if len(buf) > v.maxMsg {
		return true, fmt.Errorf("a %d-byte one-sided operation: %w (%d)", len(buf), ErrTooLong, v.maxMsg)
	}
	mr, moff, err := v.mem.Lookup(v.pd, buf)
	if err != nil {
		return true, err
	}
	i := v.newOneSided()
	if i < 0 {
		return false, nil
	}
	o := &v.oneSided[i]
	o.link = p
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
	v.wr[0] = verbs.SendWR{ID: wrOneSided | uint64(i), Op: op, Flags: verbs.Signaled, Local: o.sge[:], Remote: remote}
	return v.postOneSided(p, i)
}

// Atomic issues wr, an atomic operation on the 8-byte word at remote, for
// world rank w; the word's previous value lands in *result when it
// completes. It reports false as RDMA does.
func (v *Provider) Atomic(w int, wr verbs.SendWR, remote verbs.RemoteBuf, result *uint64) (bool, error) {
	p := v.oneSidedLink(w)
	if p == nil {
		v.Connect(w)
		return false, nil
	}
	i := v.newOneSided()
	if i < 0 {
		return false, nil
	}
	o := &v.oneSided[i]
	o.link, o.result = p, result
	o.sge[0] = verbs.SGE{MR: v.atoms, Offset: uint64(i * 8), Length: 8}
	wr.ID, wr.Flags, wr.Local, wr.Remote = wrOneSided|uint64(i), verbs.Signaled, o.sge[:], remote
	v.wr[0] = wr
	return v.postOneSided(p, i)
}

func (v *Provider) postOneSided(p *link, i int) (bool, error) {
	if err := p.qp.PostSend(v.wr[:]...); err != nil {
		v.endOneSided(i)
		if errors.Is(err, verbs.ErrQueueFull) {
			return false, nil
		}
		return true, err
	}
	p.oneSided.Issued++
	return true, nil
}

// newOneSided takes a free entry of the in-flight table, or returns -1
// when all are in use.
func (v *Provider) newOneSided() int {
	if n := len(v.freeOneSided); n > 0 {
		i := v.freeOneSided[n-1]
		v.freeOneSided = v.freeOneSided[:n-1]
		return i
	}
	if len(v.oneSided) == vMaxOneSided {
		return -1
	}
	v.oneSided = append(v.oneSided, inflight{})
	return len(v.oneSided) - 1
}

// oneSidedDone copies entry i's result into place (unless it failed) and
// frees it.
func (v *Provider) oneSidedDone(i int, ok bool) {
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

func (v *Provider) endOneSided(i int) {
	o := &v.oneSided[i]
	if o.stage != nil {
		v.putStage(o.stage)
	}
	*o = inflight{}
	v.freeOneSided = append(v.freeOneSided, i)
}
