//go:build linux

package fabric

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/rivet-hpc/rivet/fabric/internal/shm"
	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// shmProvider is the shared-memory provider (fabric/internal/shm) as the
// engine drives it; the node collectives (nodereduce.go, nodechunks.go)
// work on its segments too.
type shmProvider struct{ *shm.Provider }

// newShmSegment creates the segment of world rank rank of a universe of
// universe processes: rings rings of cells cells, for the processes that
// will send to it, named for prefix and key (shmseg.Path).
func newShmSegment(prefix string, rank, universe, rings, cells, pipeMax int, key [8]byte) (*shmProvider, error) {
	p, err := shm.New(prefix, rank, universe, rings, cells, key, pipeMax)
	if err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	return &shmProvider{p}, nil
}

func (s *shmProvider) name() string  { return "shm" }
func (s *shmProvider) eagerMax() int { return shm.Eager }
func (s *shmProvider) send(peer int, h *wire.Header, payload []byte) bool {
	return s.Send(peer, h, payload)
}
func (s *shmProvider) poll(e *engine, budget int) int { return s.Poll(e, budget) }
func (s *shmProvider) read(peer int, r *op, dst []byte, id, addr uint64, _ uint32) (bool, error) {
	return s.Read(peer, r, dst, id, addr)
}
func (s *shmProvider) closed(peer int) bool   { return s.Closed(peer) }
func (s *shmProvider) sendErr(peer int) error { return s.SendErr(peer) }
func (s *shmProvider) close() error           { return s.Close() }
func (s *shmProvider) peerFailed(e *engine, peer int, cause error) {
	s.PeerFailed(e, peer, cause)
}

func (s *shmProvider) fence(w int) {
	if word := s.PeerWord(w, shmseg.WordFenced); word != nil {
		atomic.StoreUint64(word, 1)
	}
}
func (s *shmProvider) fenceSelf() { atomic.StoreUint64(s.Word(shmseg.WordFenced), 1) }

// The engine as the shared-memory provider sees it (shm.Engine).

func (e *engine) Deliver(peer int, h *wire.Header, p *wire.Payload) { e.deliver(peer, h, p) }

func (e *engine) Sending(peer int, id uint64) ([]byte, bool) {
	r := e.rdv[id]
	if r == nil || r.peer != peer || r.state != stRdv {
		return nil, false
	}
	return r.buf, true
}

func (e *engine) Abandoned(req any) bool { return req.(*op).orphan }

func (e *engine) ReadDone(req any, peer int, id uint64, err error) {
	if errors.Is(err, shm.ErrProtocol) {
		err = procFailed("%v", err)
	}
	e.readDone(req.(*op), peer, id, err)
}
