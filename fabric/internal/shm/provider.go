//go:build linux

// Package shm is the fabric's shared-memory provider. Every process creates one segment, a file
// in /dev/shm (mode 0600, a random part in its name), that holds a
// single-producer single-consumer ring for each world rank: the ring that
// world rank w writes and this process reads (mapped in for the processes
// on the node only; Add maps a process that joins later). Peers learn the name through
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
// pipeline (pipeline.go: the sender copies fragments in as the
// receiver copies them out); it answers with a FIN frame.
//
// The provider hands what arrives to the fabric's matching engine
// (Engine) and is driven only under its lock: nothing here runs on its
// own.
package shm

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// Eager is the largest message copied through a ring.
const Eager = 16 << 10

// ErrPeerGone is what the provider says when a peer's process is gone.
var ErrPeerGone = errors.New("peer process is gone")

// Engine is what the provider hands frames and finished receives to: the
// fabric's matching engine. A receive is the engine's own value (req),
// which the provider only passes back.
type Engine interface {
	// Deliver takes a frame from world rank peer; p is valid only
	// during the call.
	Deliver(peer int, h *wire.Header, p *wire.Payload)
	// Sending returns the message of rendezvous send id to peer while it
	// still waits to be read.
	Sending(peer int, id uint64) ([]byte, bool)
	// Abandoned reports whether receive req was given up by its caller:
	// its buffer is no longer the receive's to write.
	Abandoned(req any) bool
	// ReadDone ends receive req of rendezvous message id from peer.
	ReadDone(req any, peer int, id uint64, err error)
}

// out is this process's side of the ring it writes in a peer's segment.
type out struct {
	ring       shmseg.Ring
	cells      int    // the ring's length (its segment's)
	tail       uint64 // next sequence to write; only we write the ring
	cachedHead uint64 // the reader's head when last looked at
	seg        []byte
	pid        int
}

type in struct {
	ring  shmseg.Ring
	head  uint64
	world int
}

// Provider is this process's side of the node's shared memory: its own
// segment, whose rings its peers write, and the rings it writes in
// theirs.
type Provider struct {
	path   string       // our segment, until unlinked
	file   *os.File     // our segment, open until Close: a process that joins later opens it through /proc
	seg    []byte       // our segment
	rings  int          // its rings: one per world rank
	cells  int          // its rings' length
	local  []int        // the job's world ranks on this node, in rank order; local index = position
	out    []*out       // by world rank; nil for processes on other nodes
	outs   []*out       // by local index
	in     []in         // by local index, without ourselves
	next   int          // where the next poll starts, for fairness
	h      wire.Header  // the frame being delivered: here, not on the stack,
	pl     wire.Payload // since the Engine's methods might keep them
	liov   [1]unix.Iovec
	riov   [1]unix.RemoteIovec
	selfIx int

	pipeMax int         // rendezvous messages up to this size go by pipeline
	streams []stream    // pipelined sends in progress
	reads   []pipeRead  // pipelined receives in progress
	ctl     wire.Header // a pipeline frame being sent; here so that it does not escape
	piped   int         // messages received by pipeline, for tests
	readv   int         // messages received with process_vm_readv, likewise
}

// New creates this process's segment, with a ring of cells cells for
// each of rings world ranks (see shmseg.Create), and the provider that
// will use it; Connect then maps the peers', and Add those of processes
// that join later. pipeMax is the largest rendezvous message that moves
// by pipeline (0: none).
func New(prefix string, rank, rings, cells int, rnd [8]byte, pipeMax int) (*Provider, error) {
	path, seg, f, err := shmseg.Create(prefix, rank, rings, cells, rnd)
	if err != nil {
		return nil, err
	}
	return &Provider{path: path, file: f, seg: seg, rings: rings, cells: cells, pipeMax: pipeMax, out: make([]*out, rings)}, nil
}

// FDPath names this process's segment for as long as the provider is
// open, even after Unlink: its file descriptor under /proc.
func (s *Provider) FDPath() string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), s.file.Fd())
}

// StageOff is where the staging area of the job's segments starts.
func (s *Provider) StageOff() int { return shmseg.StageOff(s.rings, s.cells) }

// Path is this process's segment's name, until Unlink.
func (s *Provider) Path() string { return s.path }

// Seg is this process's segment.
func (s *Provider) Seg() []byte { return s.seg }

// Local lists the world ranks on this node, in rank order: a process's
// local index is its position.
func (s *Provider) Local() []int { return s.local }

// SelfIx is this process's local index.
func (s *Provider) SelfIx() int { return s.selfIx }

// SegOf is the segment of the node's process with local index ix.
func (s *Provider) SegOf(ix int) []byte {
	if ix == s.selfIx {
		return s.seg
	}
	return s.outs[ix].seg
}

// Moved says how many rendezvous messages arrived by pipeline and how
// many were read with process_vm_readv.
func (s *Provider) Moved() (piped, readv int) { return s.piped, s.readv }

// Connect maps the segments of the job's processes on this node. local
// lists their world ranks in order; paths and pids are indexed like it.
func (s *Provider) Connect(me int, local []int, paths []string, pids []int) error {
	s.local = local
	s.outs = make([]*out, len(local))
	for ix, w := range local {
		if w == me {
			s.selfIx = ix
			continue
		}
		o, err := s.add(me, w, paths[ix], pids[ix])
		if err != nil {
			return err
		}
		s.outs[ix] = o
	}
	return nil
}

// Add maps the segment of world rank w, a process on this node that
// joined after Connect (one a spawn made, or the one that spawned this
// process), whose segment is at path (its FDPath).
func (s *Provider) Add(me, w int, path string, pid int) error {
	if w < 0 || w >= s.rings || w == me || s.out[w] != nil {
		return fmt.Errorf("fabric: shared memory: world rank %d cannot join (%d rings)", w, s.rings)
	}
	_, err := s.add(me, w, path, pid)
	return err
}

func (s *Provider) add(me, w int, path string, pid int) (*out, error) {
	seg, cells, err := shmseg.Open(path, s.rings, me)
	if err != nil {
		return nil, fmt.Errorf("fabric: the shared memory of rank %d: %w", w, err)
	}
	if err := shmseg.PopulateRing(s.seg, w, s.cells); err != nil {
		unix.Munmap(seg)
		return nil, fmt.Errorf("fabric: the ring of rank %d in this process's shared memory: %w", w, err)
	}
	o := &out{ring: shmseg.RingAt(seg, me, cells), cells: cells, seg: seg, pid: pid}
	s.out[w] = o
	s.in = append(s.in, in{ring: shmseg.RingAt(s.seg, w, s.cells), world: w})
	return o, nil
}

// Unlink removes our segment's name once every peer has mapped it.
func (s *Provider) Unlink() {
	if s.path != "" {
		os.Remove(s.path)
		s.path = ""
	}
}

// Send puts one frame for world rank peer in its ring, or returns false,
// putting nothing, when the ring has no room. For a rendezvous frame,
// payload is the message the peer will read in place, not copied.
func (s *Provider) Send(peer int, h *wire.Header, payload []byte) bool {
	o := s.out[peer]
	if frameLimit(h.Kind) == 0 {
		payload = nil // a rendezvous peer reads the message in place
	}
	n := uint64(o.cells)
	k := uint64(shmseg.CellsFor(len(payload)))
	if !o.room(int(k), o.cells) {
		return false
	}
	c := o.ring.Cell(o.tail, o.cells)
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
	if next := shmseg.Word(o.ring.Cell(o.tail+k, o.cells), 0); *next == o.tail+k+1 {
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
		return Eager
	case frameData:
		return Frag
	}
	return 0
}

// room reports whether k more cells fit in the ring.
func (o *out) room(k, cells int) bool {
	if o.tail+uint64(k)-o.cachedHead <= uint64(cells) {
		return true
	}
	o.cachedHead = o.ring.Head.Load()
	return o.tail+uint64(k)-o.cachedHead <= uint64(cells)
}

// Poll hands up to budget arrived frames to e, moves the pipelines on,
// and returns how many frames it handled.
func (s *Provider) Poll(e Engine, budget int) int {
	got := s.pollRings(e, budget)
	if len(s.streams)+len(s.reads) > 0 {
		got += s.pump()
	}
	return got
}

func (s *Provider) pollRings(e Engine, budget int) int {
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
	h := &s.h
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
			if h.Kind >= frameCTS {
				s.pipeFrame(e, in.world, h, &s.pl)
			} else {
				e.Deliver(in.world, h, &s.pl)
			}
			in.head += uint64(cells)
			in.ring.Head.Store(in.head)
			got++
		}
	}
	return got
}

// Read receives a rendezvous message: by pipeline up to the pipeline
// limit, one message per peer at a time (done later, through
// Engine.ReadDone); otherwise by copying from the peer's address space
// with one process_vm_readv per contiguous piece the kernel agrees to
// move (done on return).
func (s *Provider) Read(peer int, req any, dst []byte, id, addr uint64) (bool, error) {
	if len(dst) <= s.pipeMax && !s.piping(peer) {
		s.pipeRead(peer, req, dst, id)
		return false, nil
	}
	s.readv++
	return true, s.readAt(peer, dst, addr)
}

func (s *Provider) readAt(peer int, dst []byte, addr uint64) error {
	o := s.out[peer]
	for len(dst) > 0 {
		s.liov[0] = unix.Iovec{Base: &dst[0]}
		s.liov[0].SetLen(len(dst))
		s.riov[0] = unix.RemoteIovec{Base: uintptr(addr), Len: len(dst)}
		n, err := unix.ProcessVMReadv(o.pid, s.liov[:], s.riov[:], 0)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("process_vm_readv: %w", ErrPeerGone)
			}
			return os.NewSyscallError("process_vm_readv", err)
		}
		if n == 0 {
			return fmt.Errorf("process_vm_readv moved nothing: %w", ErrPeerGone)
		}
		dst = dst[n:]
		addr += uint64(n)
	}
	return nil
}

// Closed reports whether world rank peer shut down cleanly (its
// MarkClosed), as opposed to dying.
func (s *Provider) Closed(peer int) bool {
	if uint(peer) >= uint(len(s.out)) {
		return false
	}
	o := s.out[peer]
	return o != nil && atomic.LoadUint64(shmseg.Word(o.seg, shmseg.WordClosed)) == 1
}

// Word is this process's segment word at off: memory that stays mapped
// until Close.
func (s *Provider) Word(off int) *uint64 { return shmseg.Word(s.seg, off) }

// PeerWord is world rank peer's segment word at off, nil for a process
// this provider does not reach.
func (s *Provider) PeerWord(peer, off int) *uint64 {
	if uint(peer) >= uint(len(s.out)) || s.out[peer] == nil {
		return nil
	}
	return shmseg.Word(s.out[peer].seg, off)
}

// Publish stores v in this process's segment word at off, for its peers.
func (s *Provider) Publish(off int, v uint64) { atomic.StoreUint64(shmseg.Word(s.seg, off), v) }

// Reached reports whether every process on the node, this one included,
// shows at least v in its segment word at off.
func (s *Provider) Reached(off int, v uint64) bool {
	for ix := range s.outs {
		if atomic.LoadUint64(shmseg.Word(s.SegOf(ix), off)) < v {
			return false
		}
	}
	return true
}

// MarkClosed tells the peers that this process shut down on purpose.
func (s *Provider) MarkClosed() {
	if s.seg != nil {
		atomic.StoreUint64(shmseg.Word(s.seg, shmseg.WordClosed), 1)
	}
}

// Close unlinks this process's segment if it still has a name and unmaps
// every segment.
func (s *Provider) Close() error {
	s.Unlink()
	for _, o := range s.out {
		if o != nil {
			unix.Munmap(o.seg)
		}
	}
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
	s.out, s.outs, s.in = nil, nil, nil
	s.streams, s.reads = nil, nil
	if s.seg != nil {
		unix.Munmap(s.seg)
		s.seg = nil
	}
	return nil
}
