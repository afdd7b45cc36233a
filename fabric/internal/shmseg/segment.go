//go:build linux

// Package shmseg is the layout of the shared-memory provider's segments:
// the file each process creates in /dev/shm for the processes of its
// node, the words in its header, its rings of cells, and the staging
// area of the chunked node allreduce. The provider that moves frames
// through them is package fabric's; this package only says where things
// are, and creates, opens and sweeps segments.
//
// A segment holds one single-producer single-consumer ring per world
// rank of the job's universe: the ring that world rank w writes and the
// owner reads (only the node's are ever mapped in). A ring
// is a head word the reader owns, then cells of CellSize bytes; a frame
// starts on a cell with a sequence word and a header (CellHeader bytes
// together), and its payload follows contiguously.
package shmseg

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Magic is a segment's first word, stored last when it is created.
const Magic = 0x52495645_54534d34 // "RIVETSM4"

const (
	// HeaderSize is the header's length: three pages that hold the words
	// below, then the node allreduce's slots (package fabric's).
	HeaderSize = 12288
	CellSize   = 256 // frames start on a cell
	CellHeader = 48  // the sequence word and a frame header
	RingHeader = 128 // the head word, then padding to two cache lines
	// Chunk is a staging buffer of the chunked node allreduce; the
	// staging area after the rings holds two.
	Chunk = 256 << 10
)

// Header words (byte offsets).
const (
	WordMagic  = 0
	WordRings  = 8   // rings: one per process of the job's universe, by world rank
	WordCells  = 16  // cells per ring
	WordClosed = 64  // set to 1 by a clean Close
	WordEpoch  = 128 // the last world barrier this process entered (its own line)
	WordBeat   = 320 // the process's heartbeat count (its own line)
	WordFenced = 384 // set by a peer that declared the process failed (its own line)

	// The chunked node allreduce's words. The length is read right after
	// the chunk number on its line, so it shares it.
	WordChunkIn  = 192 // the last chunk whose operand this process staged
	WordChunkLen = 200 // the length of the vector of its current allreduce
	WordChunkOut = 256 // the last chunk whose share this process reduced
)

// Cells is the ring length in cells for nlocal processes: 1 MiB per
// ring, or 256 KiB when many processes share the node.
func Cells(nlocal int) int {
	if nlocal > 16 {
		return 1024
	}
	return 4096
}

// Size is the length of a segment of rings rings of cells cells each.
func Size(rings, cells int) int {
	return StageOff(rings, cells) + 2*Chunk
}

// StageOff is where the chunked node allreduce's staging area starts,
// after the rings.
func StageOff(rings, cells int) int {
	return HeaderSize + rings*(RingHeader+cells*CellSize)
}

// CellsFor is how many cells a frame with an n-byte payload takes.
func CellsFor(n int) int { return (CellHeader + n + CellSize - 1) / CellSize }

// Ring is one ring of a segment: its head word and its cells.
type Ring struct {
	Head  *atomic.Uint64
	Cells []byte
}

// Cell is cell i (a sequence number, taken modulo the ring's n cells).
func (r *Ring) Cell(i uint64, n int) []byte {
	off := int(i%uint64(n)) * CellSize
	return r.Cells[off : off+CellSize : off+CellSize]
}

// ringOff is where ring ix starts, for rings of cells cells; it ends
// RingHeader+cells*CellSize bytes later.
func ringOff(ix, cells int) int { return HeaderSize + ix*(RingHeader+cells*CellSize) }

// PopulateRing maps in the pages of ring ix of seg: done for the rings a
// process's peers write, before they do, so that no frame takes a page
// fault; the rings of processes that never come (another node's, or a
// spawn's that never happens) cost no memory. It fails, rather than let
// a write fault later, when /dev/shm has no room for the pages.
func PopulateRing(seg []byte, ix, cells int) error {
	off := ringOff(ix, cells)
	return populate(seg, off, off+RingHeader+cells*CellSize)
}

// NodeBytes is what the segments of nlocal processes of a node take in
// /dev/shm once each has mapped in what its peers write: its header and
// staging area, and a ring for every other process of the node.
func NodeBytes(nlocal, cells int) int64 {
	page := int64(os.Getpagesize())
	round := func(n int64) int64 { return (n + page - 1) / page * page }
	one := round(HeaderSize) + round(2*Chunk) + int64(nlocal-1)*round(RingHeader+int64(cells)*CellSize)
	return int64(nlocal) * one
}

// ErrNoSpace says that /dev/shm cannot hold the node's segments; it
// matches syscall.ENOSPC.
var ErrNoSpace = fmt.Errorf("/dev/shm has no room for the node's shared memory: %w", unix.ENOSPC)

// CheckSpace reports ErrNoSpace, naming the sizes, when /dev/shm has less
// room than the segments of nlocal processes with rings of cells cells
// need (NodeBytes): at start, so that a node too small for the job is an
// error there rather than a SIGBUS at the first frame that reaches a page
// the file system could not give.
func CheckSpace(nlocal, cells int) error {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil {
		return nil // nothing to say: the segment's creation will tell
	}
	need := NodeBytes(nlocal, cells)
	free := int64(st.Bavail) * st.Bsize
	if need <= free {
		return nil
	}
	return fmt.Errorf("%w: its %d processes need %s (%s each), and /dev/shm has %s free of %s — give it more room (a container's --shm-size) or run fewer processes on the node",
		ErrNoSpace, nlocal, mib(need), mib(need/int64(nlocal)), mib(free), mib(int64(st.Blocks)*st.Bsize))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// RingAt is ring ix of seg, whose rings have cells cells.
func RingAt(seg []byte, ix, cells int) Ring {
	off := ringOff(ix, cells)
	return Ring{
		Head:  (*atomic.Uint64)(unsafe.Pointer(&seg[off])),
		Cells: seg[off+RingHeader : off+RingHeader+cells*CellSize],
	}
}

// Word is the 8-byte word at off in b, for atomic access.
func Word(b []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

// nameRE finds the creator's pid in a segment's name.
var nameRE = regexp.MustCompile(`-p([0-9]+)-[0-9a-f]+$`)

// Create makes this process's segment of rings rings (one per process
// of the universe, by world rank) of cells cells each, named for prefix,
// rank, this process's pid and rnd, with mode 0600, and maps it. It
// first sweeps the segments of dead processes. The file stays open (f):
// a process that joins after the name is gone opens it through
// /proc/<pid>/fd.
func Create(prefix string, rank, rings, cells int, rnd [8]byte) (path string, seg []byte, f *os.File, err error) {
	Sweep()
	path = filepath.Join("/dev/shm", fmt.Sprintf("%s-r%d-p%d-%x", prefix, rank, os.Getpid(), rnd))
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", nil, nil, fmt.Errorf("shared memory: %w", err)
	}
	size := Size(rings, cells)
	fail := func(err error) (string, []byte, *os.File, error) {
		f.Close()
		os.Remove(path)
		return "", nil, nil, err
	}
	if err := f.Truncate(int64(size)); err != nil {
		return fail(fmt.Errorf("shared memory %s: %w", path, err))
	}
	seg, err = unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mapping %s: %w", path, os.NewSyscallError("mmap", err)))
	}
	perr := populate(seg, 0, HeaderSize)
	if perr == nil {
		perr = populate(seg, StageOff(rings, cells), len(seg))
	}
	if perr != nil {
		unix.Munmap(seg)
		return fail(fmt.Errorf("shared memory %s: %w", path, perr))
	}
	binary.LittleEndian.PutUint64(seg[WordRings:], uint64(rings))
	binary.LittleEndian.PutUint64(seg[WordCells:], uint64(cells))
	atomic.StoreUint64(Word(seg, WordMagic), Magic)
	return path, seg, f, nil
}

// Open maps a peer's segment and checks that it is one of rings rings,
// for the process of world rank ix, and returns it with its rings' length
// in cells. Only the parts that process touches are mapped in at once —
// the header, ring ix (the one it writes) and the staging area. The other
// rings stay out of its page tables: every page mapped in is a page the
// kernel unmaps when the process exits, and with each process mapping
// every segment of the node a process killed on a busy node of eight took
// 2.5 ms to be torn down, which is most of the time until its peers learn
// of it (docs/ft.md).
func Open(path string, rings, ix int) ([]byte, int, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	head, err := unix.Mmap(int(f.Fd()), 0, HeaderSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, fmt.Errorf("mapping: %w", os.NewSyscallError("mmap", err))
	}
	magic, n, cells := atomic.LoadUint64(Word(head, WordMagic)), binary.LittleEndian.Uint64(head[WordRings:]), int(binary.LittleEndian.Uint64(head[WordCells:]))
	unix.Munmap(head)
	if magic != Magic || n != uint64(rings) || cells < 1 || cells > 1<<20 || ix < 0 || ix >= rings {
		return nil, 0, fmt.Errorf("not a segment of %d rings (it has %d of %d cells) for ring %d", rings, n, cells, ix)
	}
	seg, err := unix.Mmap(int(f.Fd()), 0, Size(rings, cells), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, fmt.Errorf("mapping: %w", os.NewSyscallError("mmap", err))
	}
	err = populate(seg, 0, HeaderSize)
	if err == nil {
		err = PopulateRing(seg, ix, cells)
	}
	if err == nil {
		err = populate(seg, StageOff(rings, cells), len(seg))
	}
	if err != nil {
		unix.Munmap(seg)
		return nil, 0, err
	}
	return seg, cells, nil
}

// populate maps in the pages of seg[from:to], writable, so that the
// first frames through them take no page faults. When the file system
// cannot give the pages (a full /dev/shm) it returns an error wrapping
// ErrNoSpace where a write would have raised SIGBUS. Before Linux 5.14
// (no MADV_POPULATE_WRITE) the pages are faulted in on first use instead.
func populate(seg []byte, from, to int) error {
	page := os.Getpagesize()
	from &^= page - 1
	to = min((to+page-1)&^(page-1), len(seg))
	if from >= to {
		return nil
	}
	switch err := unix.Madvise(seg[from:to], unix.MADV_POPULATE_WRITE); err {
	case nil, unix.EINVAL:
		return nil
	case unix.EFAULT, unix.ENOMEM, unix.ENOSPC:
		return fmt.Errorf("%w: %s of it could not be mapped in (%v)", ErrNoSpace, mib(int64(to-from)), err)
	default:
		return fmt.Errorf("madvise: %w", err)
	}
}

// Sweep removes segments whose creator is dead: a process killed between
// creating its segment and unlinking it.
func Sweep() {
	names, _ := filepath.Glob("/dev/shm/rivet-*")
	for _, n := range names {
		if Orphaned(n) {
			os.Remove(n)
		}
	}
}

// Orphaned reports whether the segment named name was made by a process
// that is dead (and not by some other program's file of that name).
func Orphaned(name string) bool {
	m := nameRE.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	return err == nil && pid > 0 && unix.Kill(pid, 0) == unix.ESRCH
}
