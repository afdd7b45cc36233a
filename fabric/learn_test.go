//go:build linux

package fabric

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rivet-hpc/rivet/fabric/internal/shm"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// scriptProvider hands the engine the frames it holds, in order, at each
// poll — as a ring does when another peer's notice comes first — and
// takes every frame sent.
type scriptProvider struct {
	selfProvider
	frames []scriptFrame
}

type scriptFrame struct {
	from int
	h    wire.Header
	data []byte
}

func (s *scriptProvider) send(int, *wire.Header, []byte) bool { return true }
func (s *scriptProvider) poll(e *engine, budget int) int {
	n := 0
	for ; n < budget && len(s.frames) > 0; n++ {
		f := s.frames[0]
		s.frames = s.frames[1:]
		e.deliver(f.from, &f.h, &wire.Payload{Flat: f.data})
	}
	return n
}

// TestNoticeBeforeFrames: world rank 1 sent a message to this process
// (world rank 2) and died; rank 0's notice of its death is read first, in
// the same poll as rank 1's message. The message is still delivered
// (docs/fabric.md: frames a peer sent before dying are delivered), and
// rank 1 is failed by the end of the round, its failure spread on. Before,
// the notice fenced rank 1 at once and its message was dropped: a
// survivor raised ErrProcFailed in a barrier the others completed (3 of
// 909 runs under load).
func TestNoticeBeforeFrames(t *testing.T) {
	for _, split := range []bool{false, true} {
		e := newEngine(2, 3)
		sp := &scriptProvider{}
		e.route[0], e.route[1] = sp, sp
		e.provs = append(e.provs, sp)
		notice := scriptFrame{from: 0, h: wire.Header{Kind: wire.Notice, Tag: wire.NoticeFailed, Src: 1}}
		msg := scriptFrame{from: 1, h: wire.Header{Kind: wire.Eager, Ctx: 4, Src: 1, Tag: 5, Size: 5}, data: []byte("hello")}
		sp.frames = []scriptFrame{notice, msg}
		if split {
			// The notice came in an earlier poll, the message only
			// after it: the round that applies the failure polls first.
			e.deliver(notice.from, &notice.h, &wire.Payload{})
			sp.frames = []scriptFrame{msg}
		}
		e.progress()
		u := e.unexp.head
		if u == nil || u.peer != 1 || string(u.buf) != "hello" {
			t.Fatalf("split %v: rank 1's message was not delivered (unexpected queue head %+v)", split, u)
		}
		if err := e.failed[1]; !errors.Is(err, ErrProcFailed) {
			t.Fatalf("split %v: rank 1 is %v after the round, want failed", split, err)
		}
		if len(e.order) != 1 || e.order[0] != 1 || len(e.later) != 0 {
			t.Fatalf("split %v: known failed %v, %d still to apply", split, e.order, len(e.later))
		}
		// Fenced from here on: a frame it "sends" now does not count.
		sp.frames = []scriptFrame{msg}
		e.progress()
		if e.unexp.head.next != nil {
			t.Fatalf("split %v: a frame of rank 1 was delivered after its failure", split)
		}
	}
}

// goneProvider is a scriptProvider whose peers' memory cannot be read:
// the shared-memory provider's process_vm_readv of a process that is gone.
type goneProvider struct{ scriptProvider }

func (*goneProvider) read(int, *op, []byte, uint64, uint64, uint32) (bool, error) {
	return true, fmt.Errorf("process_vm_readv: %w", shm.ErrPeerGone)
}

// TestReadFromGone: a rendezvous receive whose sender is gone by the
// time its message is read fails with an error matching ErrProcFailed
// (files' aggregators once got a bare "process_vm_readv: peer process is
// gone"), and the sender is failed by the end of the round.
func TestReadFromGone(t *testing.T) {
	e := newEngine(0, 2)
	gp := &goneProvider{}
	e.route[1] = gp
	e.provs = append(e.provs, gp)
	r := e.get()
	r.kind, r.buf, r.peer, r.tag, r.state = reqRecv, make([]byte, 1<<20), 0, 7, stPosted
	r.h.Ctx = 4
	e.posted.push(r)
	gp.frames = []scriptFrame{{from: 1, h: wire.Header{Kind: wire.RTS, Ctx: 4, Src: 0, Tag: 7, Size: 1 << 20, ID: 1, Addr: 4096}}}
	e.progress()
	if !r.over() || !errors.Is(r.err, ErrProcFailed) {
		t.Fatalf("the receive: over %v, error %v; want it failed with ErrProcFailed", r.over(), r.err)
	}
	if err := e.failed[1]; !errors.Is(err, ErrProcFailed) {
		t.Fatalf("its sender is %v after the round, want failed", err)
	}
}
