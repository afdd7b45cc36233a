//go:build linux

package shm

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// The shared-memory pipeline: how a rendezvous message up to the
// provider's pipeline limit moves. The receiver that matched the RTS
// answers with a CTS; the sender then copies the message into the ring
// in fragments, as room allows, and the receiver copies each fragment
// out into the receive buffer as soon as it is published, so the two
// copies overlap. While the two cores share a cache, two copies through
// a ring that stays in it beat one process_vm_readv (the kernel pins the
// sender's pages for it; see docs/performance.md); the sender, though,
// has to make progress for the
// receiver to finish, which a read from its memory does not need: the
// limit bounds how much a receiver waits on a sender that is busy
// elsewhere. Fragment frames carry the sender's message id and their
// offset; the receiver still ends the exchange with a FIN.
//
// A receiver pipelines one message per peer at a time and reads the
// others that arrive meanwhile with process_vm_readv: with osu_bw's 64
// messages in flight, streaming them all through the ring ran at 4.4 GB/s
// in some runs and 26 GB/s in others on the same machine (the two copies
// pay for every cache line twice when the cores are far apart), while
// reads hold 7–9 GB/s; one message at a time keeps what the pipeline
// gains in latency and in collectives and leaves windows at the reads'
// bandwidth (docs/performance.md).

// ErrProtocol is the error of a pipelined receive whose fragments do not
// add up: the sender broke the protocol.
var ErrProtocol = errors.New("shm: pipeline protocol broken")

// Provider-internal frame kinds; the engine never sees them.
const (
	frameCTS  uint32 = 0x100 + iota // the receiver wants message id by pipeline: size bytes of it
	frameData                       // size bytes of message id, from offset addr
)

// fragFor is the fragment payload for a ring of cells cells: Frag, or
// less in a short ring, so that a fragment and an eager frame fit.
func fragFor(cells int) int {
	return min(Frag, cells*shmseg.CellSize/4-shmseg.CellHeader)
}

const (
	Frag = 32 << 10 // the largest pipeline fragment payload
	// DefaultPipeMax is the default pipeline limit, in bytes: larger messages
	// are read with process_vm_readv. It is 0, the pipeline off, because
	// on the machine it was measured on it won only while the two cores
	// shared a cache (2–3× at 32 KiB–1 MiB) and lost by up to 2× otherwise,
	// and the host moved between the two within a run; the single copy
	// does not care. RIVET_SHM_PIPELINE_MAX turns it on (4194304 was
	// measured); see docs/performance.md.
	DefaultPipeMax = 0
)

// TestHookFragment runs, when set, after each fragment a stream puts in
// a ring: tests die mid-message with it.
var TestHookFragment func(peer, off int)

// stream is a pipelined send in progress: the part of a message its
// receiver asked for, and how much of it is in the ring.
type stream struct {
	buf  []byte
	peer int
	id   uint64
	off  int
}

// pipeRead is a pipelined receive in progress.
type pipeRead struct {
	r     any // the engine's receive
	dst   []byte
	peer  int
	id    uint64
	got   int
	asked bool // the CTS is in the ring
}

// pipeRead starts receiving message id from peer into dst by pipeline.
func (s *Provider) pipeRead(peer int, req any, dst []byte, id uint64) {
	s.piped++
	s.reads = append(s.reads, pipeRead{r: req, dst: dst, peer: peer, id: id})
	s.ask(&s.reads[len(s.reads)-1])
}

// ask sends rd's CTS if there is room; poll retries until there is.
func (s *Provider) ask(rd *pipeRead) {
	s.ctl = wire.Header{Kind: frameCTS, ID: rd.id, Size: uint64(len(rd.dst))}
	rd.asked = s.Send(rd.peer, &s.ctl, nil)
}

// piping reports whether a message from peer is coming by pipeline.
func (s *Provider) piping(peer int) bool {
	for i := range s.reads {
		if s.reads[i].peer == peer {
			return true
		}
	}
	return false
}

// pipeFrame takes a CTS or a fragment from peer.
func (s *Provider) pipeFrame(e Engine, peer int, h *wire.Header, p *wire.Payload) {
	if h.Kind == frameCTS {
		buf, ok := e.Sending(peer, h.ID)
		if !ok {
			return // failed or withdrawn meanwhile
		}
		n := min(int(h.Size), len(buf))
		s.streams = append(s.streams, stream{buf: buf[:n], peer: peer, id: h.ID})
		return
	}
	i := s.findRead(peer, h.ID)
	if i < 0 {
		return // its receive already failed
	}
	rd := &s.reads[i]
	off, n := int(h.Addr), p.Len()
	if off != rd.got || n > len(rd.dst)-off {
		r := rd.r
		s.reads = slices.Delete(s.reads, i, i+1)
		e.ReadDone(r, peer, h.ID, fmt.Errorf("%w: world rank %d: pipeline fragment at %d+%d of %d bytes, expected %d", ErrProtocol, peer, off, n, len(rd.dst), rd.got))
		return
	}
	if !e.Abandoned(rd.r) { // the abandoned call's buffer is its owner's again
		p.CopyTo(rd.dst[off : off+n])
	}
	rd.got += n
	if rd.got == len(rd.dst) {
		r := rd.r
		s.reads = slices.Delete(s.reads, i, i+1)
		e.ReadDone(r, peer, h.ID, nil)
	}
}

func (s *Provider) findRead(peer int, id uint64) int {
	for i := range s.reads {
		if s.reads[i].id == id && s.reads[i].peer == peer {
			return i
		}
	}
	return -1
}

// pump sends the CTSs that found no room and fills the rings with the
// streams' next fragments. Streams leave room for an eager message, so
// the engine's own frames are not starved; it returns how many frames
// went out.
func (s *Provider) pump() int {
	n := 0
	for i := range s.reads {
		if rd := &s.reads[i]; !rd.asked {
			if s.ask(rd); rd.asked {
				n++
			}
		}
	}
	for i := 0; i < len(s.streams); {
		st := &s.streams[i]
		o := s.out[st.peer]
		if !o.joined && !s.join(o, st.peer) {
			i++
			continue
		}
		frag := fragFor(o.cells)
		for st.off < len(st.buf) {
			k := min(frag, len(st.buf)-st.off)
			if !o.room(shmseg.CellsFor(k)+shmseg.CellsFor(Eager), o.cells) {
				break
			}
			s.ctl = wire.Header{Kind: frameData, ID: st.id, Size: uint64(k), Addr: uint64(st.off)}
			s.Send(st.peer, &s.ctl, st.buf[st.off:st.off+k])
			st.off += k
			n++
			if TestHookFragment != nil {
				TestHookFragment(st.peer, st.off)
			}
		}
		if st.off < len(st.buf) {
			i++
			continue
		}
		s.streams = slices.Delete(s.streams, i, i+1)
	}
	return n
}

// PeerFailed ends the pipelines with world rank peer, which is gone: its
// receives fail with cause, and nothing more is sent to it.
func (s *Provider) PeerFailed(e Engine, peer int, cause error) {
	for i := 0; i < len(s.streams); {
		if s.streams[i].peer == peer {
			s.streams = slices.Delete(s.streams, i, i+1)
			continue
		}
		i++
	}
	for i := 0; i < len(s.reads); {
		if rd := s.reads[i]; rd.peer == peer {
			s.reads = slices.Delete(s.reads, i, i+1)
			e.ReadDone(rd.r, peer, rd.id, cause)
			continue
		}
		i++
	}
}
