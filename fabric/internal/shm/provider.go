//go:build linux

// Package shm is the fabric's shared-memory provider. Every process
// creates one segment, a file in /dev/shm (mode 0600, a random part in
// its name), that holds single-producer single-consumer rings its peers
// write and it reads: a peer claims one the first time it sends to the
// process (shmseg.Join), and the process starts polling it when it sees
// the claim. So memory and polling grow with the peers a process hears
// from, not with the node. Peers learn the name through the bootstrap,
// map it and count themselves in its header (Add maps a process that
// joins later, through the owner's descriptor), and once the count says
// every process of the job on the node has, the owner unlinks it, so a
// job that later crashes leaves nothing behind (one that dies earlier is
// swept by the launcher and by the next job). A process that finishes
// before its peers have all mapped its segment leaves the name to them:
// a peer that maps it then finds it closed, not gone.
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
	"slices"
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

// out is this process's side of a peer's segment: the ring it writes
// there, once it has claimed one.
type out struct {
	ring       shmseg.Ring
	cells      int    // the ring's length (its segment's)
	tail       uint64 // next sequence to write; only we write the ring
	cachedHead uint64 // the reader's head when last looked at
	seg        []byte
	rings      int    // the segment's
	mapped     uint64 // the ring's cells mapped in, from its start
	pid        int
	joined     bool  // ring is ours
	err        error // why no ring could be claimed: nothing more is sent
}

// in is a ring of this process's segment that a peer writes.
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
	rings  int          // its rings: one for each process the node may hold
	cells  int          // its rings' length
	me     int          // this process's world rank
	key    [8]byte      // the random part of the job's segment names
	local  []int        // the job's world ranks on this node, in rank order; local index = position
	out    []*out       // by world rank; nil for processes on other nodes
	outs   []*out       // by local index
	in     []in         // the rings peers have claimed and named themselves in, in that order
	seen   int          // the claims looked at
	naming []int        // rings claimed whose writer has not named itself yet
	next   int          // where the next poll starts, for fairness
	h      wire.Header  // the frame being delivered: here, not on the stack,
	pl     wire.Payload // since the Engine's methods might keep them
	liov   [1]unix.Iovec
	riov   [1]unix.RemoteIovec
	selfIx int
	staged bool // the staging area is mapped in

	pipeMax int         // rendezvous messages up to this size go by pipeline
	streams []stream    // pipelined sends in progress
	reads   []pipeRead  // pipelined receives in progress
	ctl     wire.Header // a pipeline frame being sent; here so that it does not escape
	piped   int         // messages received by pipeline, for tests
	readv   int         // messages received with process_vm_readv, likewise
}

// New creates the segment of world rank rank of a universe of universe
// processes, with rings rings of cells cells, named for prefix and key
// (see shmseg.Create), and the provider that will use it; Connect then
// maps the peers', and Add those of processes that join later. pipeMax is
// the largest rendezvous message that moves by pipeline (0: none).
func New(prefix string, rank, universe, rings, cells int, key [8]byte, pipeMax int) (*Provider, error) {
	if rank < 0 || rank >= universe {
		return nil, fmt.Errorf("fabric: shared memory: world rank %d of %d", rank, universe)
	}
	path, seg, f, err := shmseg.Create(prefix, rank, rings, cells, key)
	if err != nil {
		return nil, err
	}
	return &Provider{path: path, file: f, seg: seg, rings: rings, cells: cells, me: rank, key: key, pipeMax: pipeMax, out: make([]*out, universe)}, nil
}

// Key is the random part of the job's segment names (shmseg.Path).
func (s *Provider) Key() [8]byte { return s.key }

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

// Stage maps in this process's staging area, the first time it is called
// (shmseg.PopulateStage); it fails while /dev/shm has no room for it.
func (s *Provider) Stage() error {
	if s.staged {
		return nil
	}
	if err := shmseg.PopulateStage(s.seg, s.rings, s.cells); err != nil {
		return err
	}
	s.staged = true
	return nil
}

// Moved says how many rendezvous messages arrived by pipeline and how
// many were read with process_vm_readv.
func (s *Provider) Moved() (piped, readv int) { return s.piped, s.readv }

// Connect maps the segments of the job's processes on this node. local
// lists their world ranks in order; paths and pids are indexed like it.
func (s *Provider) Connect(local []int, paths []string, pids []int) error {
	s.local = local
	s.outs = make([]*out, len(local))
	for ix, w := range local {
		if w == s.me {
			s.selfIx = ix
			continue
		}
		o, err := s.add(w, paths[ix], pids[ix])
		if err != nil {
			return err
		}
		atomic.AddUint64(shmseg.Word(o.seg, shmseg.WordMapped), 1)
		s.outs[ix] = o
	}
	s.unlinkIfMapped()
	return nil
}

// unlinkIfMapped unlinks this process's segment once every other process
// of the job on this node has mapped it.
func (s *Provider) unlinkIfMapped() {
	if s.path != "" && atomic.LoadUint64(shmseg.Word(s.seg, shmseg.WordMapped)) >= uint64(len(s.local)-1) {
		s.Unlink()
	}
}

// Add maps the segment of world rank w, a process on this node that
// joined after Connect (one a spawn made, or the one that spawned this
// process), whose segment is at path (its FDPath).
func (s *Provider) Add(w int, path string, pid int) error {
	if w < 0 || w >= len(s.out) || w == s.me || s.out[w] != nil {
		return fmt.Errorf("fabric: shared memory: world rank %d cannot join (a universe of %d)", w, len(s.out))
	}
	_, err := s.add(w, path, pid)
	return err
}

func (s *Provider) add(w int, path string, pid int) (*out, error) {
	seg, rings, cells, err := shmseg.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fabric: the shared memory of rank %d: %w", w, err)
	}
	o := &out{cells: cells, rings: rings, seg: seg, pid: pid}
	s.out[w] = o
	return o, nil
}

// join claims o's ring, the first time this process sends to world rank
// peer, and reports whether it has one.
func (s *Provider) join(o *out, peer int) bool {
	if o.err != nil {
		return false
	}
	r, err := shmseg.Join(o.seg, o.rings, o.cells, s.me)
	if err != nil {
		o.err = fmt.Errorf("fabric: shared memory to world rank %d: %w", peer, err)
		return false
	}
	o.ring, o.joined, o.mapped = r, true, uint64(shmseg.JoinCells(o.cells))
	return true
}

// grow maps in o's ring up to cell need (not included), on the frames'
// first way round it, GrowCells at a time; like join, it reports whether
// it could.
func (s *Provider) grow(o *out, peer int, need uint64) bool {
	to := min(max(need, o.mapped+shmseg.GrowCells), uint64(o.cells))
	if err := o.ring.Populate(int(o.mapped), int(to)); err != nil {
		o.err = fmt.Errorf("fabric: shared memory to world rank %d: %w", peer, err)
		return false
	}
	o.mapped = to
	return true
}

// SendErr is why nothing can be sent to world rank peer any more (a ring
// in its segment could not be claimed: shmseg.ErrNoSpace when /dev/shm is
// full), or nil.
func (s *Provider) SendErr(peer int) error {
	if uint(peer) >= uint(len(s.out)) || s.out[peer] == nil {
		return nil
	}
	return s.out[peer].err
}

// admit starts polling the rings peers have claimed since it last looked.
func (s *Provider) admit() {
	for i := 0; i < len(s.naming); {
		if s.name(s.naming[i]) {
			s.naming = slices.Delete(s.naming, i, i+1)
			continue
		}
		i++
	}
	for n := min(shmseg.Joined(s.seg), s.rings); s.seen < n; s.seen++ {
		if !s.name(s.seen) {
			s.naming = append(s.naming, s.seen)
		}
	}
}

// name polls ring ix from now on if its writer has named itself.
func (s *Provider) name(ix int) bool {
	w, ok := shmseg.Writer(s.seg, ix)
	if ok {
		s.in = append(s.in, in{ring: shmseg.RingAt(s.seg, s.rings, ix, s.cells), world: w})
	}
	return ok
}

// Unlink removes our segment's name.
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
	if !o.joined && !s.join(o, peer) {
		return false
	}
	if frameLimit(h.Kind) == 0 {
		payload = nil // a rendezvous peer reads the message in place
	}
	n := uint64(o.cells)
	k := uint64(shmseg.CellsFor(len(payload)))
	if !o.room(int(k), o.cells) {
		return false
	}
	// Until the ring has been round once, the cells this frame takes and
	// the one after it (the reader polls it next) may not be mapped in.
	if o.mapped < n && o.tail+k+1 > o.mapped && !s.grow(o, peer, min(o.tail+k+1, n)) {
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
	if len(s.naming) > 0 || shmseg.Joined(s.seg) > s.seen {
		s.admit()
	}
	if s.path != "" {
		s.unlinkIfMapped()
	}
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

// Close unmaps every segment. It unlinks this process's segment if every
// peer of the job on the node has mapped it; otherwise the name stays for
// the ones still to come, and the launcher or the next job removes it.
func (s *Provider) Close() error {
	if s.local == nil {
		s.Unlink() // never connected: no peer will come
	}
	s.unlinkIfMapped()
	for _, o := range s.out {
		if o != nil {
			unix.Munmap(o.seg)
		}
	}
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
	s.out, s.outs, s.in, s.naming = nil, nil, nil, nil
	s.streams, s.reads = nil, nil
	if s.seg != nil {
		unix.Munmap(s.seg)
		s.seg = nil
	}
	return nil
}
