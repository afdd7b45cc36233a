//go:build linux

package fabric

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// The shared-memory provider. Every process creates one segment, a file
// in /dev/shm (mode 0600, a random part in its name), that holds one
// single-producer single-consumer ring per process on the node: the ring
// that peer i writes and this process reads. Peers learn the name through
// the bootstrap, map it, and once everyone has mapped everything the
// owner unlinks it, so a job that later crashes leaves nothing behind
// (one that dies earlier is swept by the launcher and by the next job).
//
// A ring is a head word the reader owns and 256-byte cells. A frame
// starts on a cell with a sequence word and a header, its payload follows
// contiguously (a frame of up to 208 payload bytes fits one cell), and the
// writer stores the sequence word last: the reader polls the one cache
// line that holds the next frame's sequence, header and first payload
// bytes, and small messages sit in consecutive lines of the ring. The
// reader only reads the ring (and stores its head): before publishing a
// frame the writer clears the first word of the cell after it if stale
// payload there would pass for the next sequence number, so ring lines
// travel one way. Messages up to the eager limit (16 KiB) are copied
// through the ring; longer ones go by rendezvous: the receiver reads them
// straight from the sender's memory with process_vm_readv (one copy, no
// staging) or, when RIVET_SHM_PIPELINE_MAX enables it, has them come by
// pipeline (shm_pipeline.go: the sender copies fragments in as the
// receiver copies them out); it answers with a FIN frame.

// shmEager is the largest message copied through a ring.
const shmEager = 16 << 10

// shmOut is this process's side of the ring it writes in a peer's segment.
type shmOut struct {
	ring       shmseg.Ring
	tail       uint64 // next sequence to write; only we write the ring
	cachedHead uint64 // the reader's head when last looked at
	seg        []byte
	pid        int
}

type shmIn struct {
	ring  shmseg.Ring
	head  uint64
	world int
}

type shmProvider struct {
	path   string // our segment, until unlinked
	seg    []byte // our segment
	cells  int
	local  []int        // world ranks on this node, in rank order; local index = position
	out    []*shmOut    // by world rank; nil for processes on other nodes
	outs   []*shmOut    // by local index
	in     []shmIn      // by local index, without ourselves
	next   int          // where the next poll starts, for fairness
	pl     wire.Payload // the frame being delivered
	liov   [1]unix.Iovec
	riov   [1]unix.RemoteIovec
	selfIx int

	pipeMax int           // rendezvous messages up to this size go by pipeline
	streams []shmStream   // pipelined sends in progress
	reads   []shmPipeRead // pipelined receives in progress
	ctl     wire.Header   // a pipeline frame being sent; here so that it does not escape
	piped   int           // messages received by pipeline, for tests
	readv   int           // messages received with process_vm_readv, likewise
}

// newShmSegment creates this process's segment for nlocal processes.
func newShmSegment(prefix string, rank, nlocal int) (*shmProvider, error) {
	var rnd [8]byte
	if _, err := randRead(rnd[:]); err != nil {
		return nil, err
	}
	path, seg, err := shmseg.Create(prefix, rank, nlocal, rnd)
	if err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	return &shmProvider{path: path, seg: seg, cells: shmseg.Cells(nlocal)}, nil
}

// connect maps the peers' segments. local lists the node's world ranks in
// order; paths and pids are indexed like it.
func (s *shmProvider) connect(me int, local []int, paths []string, pids []int) error {
	s.local = local
	s.out = make([]*shmOut, slices.Max(local)+1)
	s.outs = make([]*shmOut, len(local))
	for ix, w := range local {
		if w == me {
			s.selfIx = ix
			continue
		}
		seg, err := shmseg.Open(paths[ix], len(local))
		if err != nil {
			return fmt.Errorf("fabric: the shared memory of rank %d: %w", w, err)
		}
		o := &shmOut{ring: shmseg.RingAt(seg, s.indexOf(me), s.cells), seg: seg, pid: pids[ix]}
		s.out[w] = o
		s.outs[ix] = o
		s.in = append(s.in, shmIn{ring: shmseg.RingAt(s.seg, ix, s.cells), world: w})
	}
	return nil
}

func (s *shmProvider) indexOf(me int) int {
	for i, w := range s.local {
		if w == me {
			return i
		}
	}
	return -1
}

// unlink removes our segment's name once every peer has mapped it.
func (s *shmProvider) unlink() {
	if s.path != "" {
		os.Remove(s.path)
		s.path = ""
	}
}

func (s *shmProvider) name() string  { return "shm" }
func (s *shmProvider) eagerMax() int { return shmEager }

func (s *shmProvider) send(peer int, h *wire.Header, payload []byte) bool {
	o := s.out[peer]
	if frameLimit(h.Kind) == 0 {
		payload = nil // a rendezvous peer reads the message in place
	}
	n := uint64(s.cells)
	k := uint64(shmseg.CellsFor(len(payload)))
	if !o.room(int(k), s.cells) {
		return false
	}
	c := o.ring.Cell(o.tail, s.cells)
	h.Put(c[8:], h.Addr)
	// The payload follows the header, straight across cell boundaries
	// (and around the ring's end).
	off := int(o.tail%n)*shmseg.CellSize + shmseg.CellHeader
	m := copy(o.ring.Cells[off:], payload)
	copy(o.ring.Cells, payload[m:])
	// The reader looks for the next frame on the cell after this one. If
	// stale payload there reads as that frame's sequence number, clear it
	// first: a check of a line this process wrote last, not a store the
	// reader would have to fetch back.
	if next := shmseg.Word(o.ring.Cell(o.tail+k, s.cells), 0); *next == o.tail+k+1 {
		*next = 0
	}
	atomic.StoreUint64(shmseg.Word(c, 0), o.tail+1) // publishes the frame
	o.tail += k
	return true
}

// frameLimit is the most payload a frame of kind carries in the ring.
func frameLimit(kind uint32) uint64 {
	switch kind {
	case wire.Eager:
		return shmEager
	case shmData:
		return shmFrag
	}
	return 0
}

// room reports whether k more cells fit in the ring.
func (o *shmOut) room(k, cells int) bool {
	if o.tail+uint64(k)-o.cachedHead <= uint64(cells) {
		return true
	}
	o.cachedHead = o.ring.Head.Load()
	return o.tail+uint64(k)-o.cachedHead <= uint64(cells)
}

func (s *shmProvider) poll(e *engine, budget int) int {
	got := s.pollRings(e, budget)
	if len(s.streams)+len(s.reads) > 0 {
		got += s.pump()
	}
	return got
}

func (s *shmProvider) pollRings(e *engine, budget int) int {
	got := 0
	n := len(s.in)
	if n == 0 {
		return 0
	}
	start := s.next
	s.next++
	if s.next >= n {
		s.next = 0
	}
	var h wire.Header
	for k := 0; k < n && got < budget; k++ {
		i := start + k
		if i >= n {
			i -= n
		}
		in := &s.in[i]
		// A few frames per ring per round, so one busy sender cannot
		// starve the others.
		for j := 0; j < 8 && got < budget; j++ {
			c := in.ring.Cell(in.head, s.cells)
			if atomic.LoadUint64(shmseg.Word(c, 0)) != in.head+1 {
				break
			}
			h.Get(c[8:])
			cells := 1
			s.pl = wire.Payload{}
			if limit := frameLimit(h.Kind); limit > 0 {
				size := int(min(h.Size, limit))
				off := int(in.head%uint64(s.cells))*shmseg.CellSize + shmseg.CellHeader
				s.pl = wire.Payload{Ring: in.ring.Cells, Off: off, N: size}
				cells = shmseg.CellsFor(size)
			}
			if h.Kind >= shmCTS {
				s.pipeFrame(e, in.world, &h, &s.pl)
			} else {
				e.deliver(in.world, &h, &s.pl)
			}
			in.head += uint64(cells)
			in.ring.Head.Store(in.head)
			got++
		}
	}
	return got
}

// read receives a rendezvous message: by pipeline up to the pipeline
// limit, one message per peer at a time (done later, through
// engine.readDone); otherwise by copying from the peer's address space
// with one process_vm_readv per contiguous piece the kernel agrees to
// move (done on return).
func (s *shmProvider) read(peer int, r *op, dst []byte, id, addr uint64, _ uint32) (bool, error) {
	if len(dst) <= s.pipeMax && !s.piping(peer) {
		s.pipeRead(peer, r, dst, id)
		return false, nil
	}
	s.readv++
	return true, s.readAt(peer, dst, addr)
}

func (s *shmProvider) readAt(peer int, dst []byte, addr uint64) error {
	o := s.out[peer]
	for len(dst) > 0 {
		s.liov[0] = unix.Iovec{Base: &dst[0]}
		s.liov[0].SetLen(len(dst))
		s.riov[0] = unix.RemoteIovec{Base: uintptr(addr), Len: len(dst)}
		n, err := unix.ProcessVMReadv(o.pid, s.liov[:], s.riov[:], 0)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("process_vm_readv: %w", errPeerGone)
			}
			return os.NewSyscallError("process_vm_readv", err)
		}
		if n == 0 {
			return fmt.Errorf("process_vm_readv moved nothing: %w", errPeerGone)
		}
		dst = dst[n:]
		addr += uint64(n)
	}
	return nil
}

func (s *shmProvider) closed(peer int) bool {
	if uint(peer) >= uint(len(s.out)) {
		return false
	}
	o := s.out[peer]
	return o != nil && atomic.LoadUint64(shmseg.Word(o.seg, shmseg.WordClosed)) == 1
}

// publish stores v in this process's segment word at off, for its peers.
func (s *shmProvider) publish(off int, v uint64) { atomic.StoreUint64(shmseg.Word(s.seg, off), v) }

// reached reports whether every process on the node, this one included,
// shows at least v in its segment word at off.
func (s *shmProvider) reached(off int, v uint64) bool {
	for ix := range s.outs {
		if atomic.LoadUint64(shmseg.Word(s.segOf(ix), off)) < v {
			return false
		}
	}
	return true
}

// markClosed tells the peers that this process shut down on purpose.
func (s *shmProvider) markClosed() {
	if s.seg != nil {
		atomic.StoreUint64(shmseg.Word(s.seg, shmseg.WordClosed), 1)
	}
}

func (s *shmProvider) close() error {
	s.unlink()
	for _, o := range s.outs {
		if o != nil {
			unix.Munmap(o.seg)
		}
	}
	s.out, s.outs, s.in = nil, nil, nil
	s.streams, s.reads = nil, nil
	if s.seg != nil {
		unix.Munmap(s.seg)
		s.seg = nil
	}
	return nil
}
