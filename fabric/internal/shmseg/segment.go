//go:build linux

// Package shmseg is the layout of the shared-memory provider's segments:
// the file each process creates in /dev/shm for the processes of its
// node, the words in its header, its rings of cells, and the staging
// area of the chunked node allreduce. The provider that moves frames
// through them is package fabric's; this package only says where things
// are, and creates, opens and sweeps segments.
//
// A segment holds single-producer single-consumer rings, one for each
// process of the node that has sent its owner something: a sender claims
// the next free ring with an atomic increment of the header's join count
// and names itself in the ring's join slot. So a process holds rings for
// the peers it hears from, not for every process of the node, and a ring
// is mapped in only when its sender claims it; the ring's length
// shrinks as the node's processes grow in number (Cells), so that the
// rings of a process never take more than RingBudget bytes. A ring is a
// head word the reader owns, then cells of CellSize bytes; a frame
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
const Magic = 0x52495645_54534d36 // "RIVETSM6"

const (
	// HeaderSize is the header's length: three pages that hold the words
	// below, then the node allreduce's slots (package fabric's).
	HeaderSize = 12288
	CellSize   = 256 // frames start on a cell
	CellHeader = 48  // the sequence word and a frame header
	HeadSize   = 128 // a ring's head: the head word, then padding to two cache lines
	// Chunk is a staging buffer of the chunked node allreduce; the
	// staging area after the rings holds two.
	Chunk = 256 << 10

	// RingBudget bounds the rings of one process's segment: a ring is
	// RingBudget/(processes of the node - 1) bytes, rounded down to a
	// power of two, between MinRing and MaxRing.
	RingBudget = 4 << 20
	MinRing    = 32 << 10 // two cells more than a 16 KiB eager frame takes
	MaxRing    = 1 << 20
)

// Header words (byte offsets).
const (
	WordMagic  = 0
	WordRings  = 8   // how many rings the segment has
	WordCells  = 16  // cells per ring
	WordClosed = 64  // set to 1 by a clean Close
	WordEpoch  = 128 // the last world barrier this process entered (its own line)
	WordBeat   = 320 // the process's heartbeat count (its own line)
	WordFenced = 384 // set by a peer that declared the process failed (its own line)
	WordJoined = 448 // rings claimed by senders (its own line)
	WordMapped = 456 // how many of the job's processes on the node have mapped the segment
	WordBeatID = 464 // the process's heartbeat thread id, then its pid namespace (fabric's)

	// The chunked node allreduce's words. The length is read right after
	// the chunk number on its line, so it shares it.
	WordChunkIn  = 192 // the last chunk whose operand this process staged
	WordChunkLen = 200 // the length of the vector of its current allreduce
	WordChunkOut = 256 // the last chunk whose share this process reduced
)

// Cells is the ring length in cells for a node that may hold nodeCap
// processes: 1 MiB rings up to 5 processes, then halving as the count
// doubles (256 KiB at 16), never below MinRing (from 129 on).
func Cells(nodeCap int) int {
	b := MaxRing
	for b > MinRing && b*(nodeCap-1) > RingBudget {
		b >>= 1
	}
	return b / CellSize
}

// Size is the length of a segment of rings rings of cells cells each.
func Size(rings, cells int) int {
	return StageOff(rings, cells) + 2*Chunk
}

// joinBytes is the length of the join slots of a segment of rings rings,
// page-aligned so that the rings start on a page.
func joinBytes(rings int) int {
	page := os.Getpagesize()
	return (4*rings + page - 1) / page * page
}

// headsOff is where the rings' heads start, after the join slots; the
// heads are apart from the cells so that a ring's cells fill whole pages
// and its head shares a page with other rings' heads, not with cells.
func headsOff(rings int) int { return HeaderSize + joinBytes(rings) }

// ringsOff is where the rings' cells start, on a page after the heads.
func ringsOff(rings int) int {
	page := os.Getpagesize()
	return headsOff(rings) + (rings*HeadSize+page-1)/page*page
}

// StageOff is where the chunked node allreduce's staging area starts,
// after the rings.
func StageOff(rings, cells int) int {
	return ringsOff(rings) + rings*cells*CellSize
}

// CellsFor is how many cells a frame with an n-byte payload takes.
func CellsFor(n int) int { return (CellHeader + n + CellSize - 1) / CellSize }

// Ring is one ring of a segment: its head word and its cells.
type Ring struct {
	Head  *atomic.Uint64
	Cells []byte
}

// Populate maps in the ring's cells from cell from to cell to (not
// included), as populate does: a writer does before its frames reach
// them, so that neither it nor the reader, who polls the cell after the
// last frame, touches a page the file system might not give.
func (r *Ring) Populate(from, to int) error {
	return populateAt(uintptr(unsafe.Pointer(&r.Cells[0])), from*CellSize, to*CellSize)
}

// Cell is cell i (a sequence number, taken modulo the ring's n cells).
func (r *Ring) Cell(i uint64, n int) []byte {
	off := int(i%uint64(n)) * CellSize
	return r.Cells[off : off+CellSize : off+CellSize]
}

// ringOff is where the cells of ring ix of a segment of rings rings of
// cells cells start (on a page); they end cells*CellSize bytes later.
func ringOff(rings, ix, cells int) int { return ringsOff(rings) + ix*cells*CellSize }

// headOff is where ring ix's head is.
func headOff(rings, ix int) int { return headsOff(rings) + ix*HeadSize }

// RingAt is ring ix of seg, whose rings rings have cells cells.
func RingAt(seg []byte, rings, ix, cells int) Ring {
	off := ringOff(rings, ix, cells)
	return Ring{
		Head:  (*atomic.Uint64)(unsafe.Pointer(&seg[headOff(rings, ix)])),
		Cells: seg[off : off+cells*CellSize],
	}
}

// slot is the join slot of ring ix: the world rank of its writer, plus one.
func slot(seg []byte, ix int) *uint32 {
	return (*uint32)(unsafe.Pointer(&seg[HeaderSize+4*ix]))
}

// Join claims a ring of seg, a peer's segment of rings rings of cells
// cells, for world rank world to write, and maps in its head and its
// first JoinCells cells; the writer maps in the rest as its frames first
// reach them (Ring.Populate). A ring is never
// claimed twice, and a claim is never given back: a process joins each
// peer once. It fails when every ring is taken (more processes came to
// the node than its segments were made for) or when /dev/shm has no room
// for the ring's pages (ErrNoSpace).
func Join(seg []byte, rings, cells, world int) (Ring, error) {
	ix := int(atomic.AddUint64(Word(seg, WordJoined), 1) - 1)
	if ix >= rings {
		return Ring{}, fmt.Errorf("all %d rings of the segment are taken", rings)
	}
	r := RingAt(seg, rings, ix, cells)
	off, head := ringOff(rings, ix, cells), headOff(rings, ix)
	err := populate(seg, head, head+HeadSize)
	if err == nil {
		err = populate(seg, off, off+JoinCells(cells)*CellSize)
	}
	if err != nil {
		return Ring{}, err
	}
	atomic.StoreUint32(slot(seg, ix), uint32(world)+1)
	return r, nil
}

// GrowCells is how many cells a writer maps in at a time as its frames
// first go round its ring: 16 KiB.
const GrowCells = 64

// JoinCells is how many of a ring's cells Join maps in: a page, enough
// for the few small frames most peers ever exchange (notices, trees).
func JoinCells(cells int) int { return min(cells, 16) }

// Joined is how many rings of seg senders have claimed. A ring below it
// whose Writer is not yet known is being joined, or its sender died
// while joining.
func Joined(seg []byte) int { return int(atomic.LoadUint64(Word(seg, WordJoined))) }

// Writer is the world rank that writes ring ix of seg, once its Join has
// mapped it in.
func Writer(seg []byte, ix int) (world int, ok bool) {
	v := atomic.LoadUint32(slot(seg, ix))
	return int(v) - 1, v != 0
}

// PopulateStage maps in the staging area of seg, a segment of rings rings
// of cells cells: done by its owner before its first chunked allreduce.
func PopulateStage(seg []byte, rings, cells int) error {
	return populate(seg, StageOff(rings, cells), Size(rings, cells))
}

// StartBytes is what the segment of one process of rings rings takes in
// /dev/shm from the start: its header and join slots. Each peer it hears
// from adds the start of a ring (JoinBytes), which grows with that
// peer's traffic up to cells*CellSize bytes, and its first
// large node allreduce adds the staging area (StageBytes).
func StartBytes(rings int) int64 { return int64(HeaderSize + joinBytes(rings)) }

// JoinBytes is the memory a ring of cells cells takes once claimed: its
// first cells, in whole pages, and its head.
func JoinBytes(cells int) int64 {
	page := int64(os.Getpagesize())
	return (int64(JoinCells(cells)*CellSize)+page-1)/page*page + HeadSize
}

// StageBytes is the memory of a segment's staging area.
const StageBytes = 2 * Chunk

// ErrNoSpace says that /dev/shm cannot hold the node's segments; it
// matches syscall.ENOSPC.
var ErrNoSpace = fmt.Errorf("/dev/shm has no room for the node's shared memory: %w", unix.ENOSPC)

// CheckSpace reports ErrNoSpace, naming the sizes, when /dev/shm has less
// room than nlocal processes with segments of rings rings of cells cells
// need to start and exchange a first message each: their headers and the
// start of a ring apiece. At start, so that a node too small for the job
// is an error there; the memory of later rings is mapped in by Join and
// Ring.Populate, which fail the same way.
func CheckSpace(nlocal, rings, cells int) error {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil {
		return nil // nothing to say: the segment's creation will tell
	}
	one := StartBytes(rings)
	if nlocal > 1 {
		one += JoinBytes(cells) - HeadSize + int64(os.Getpagesize()) // and its heads' first page
	}
	need := int64(nlocal) * one
	free := int64(st.Bavail) * st.Bsize
	if need <= free {
		return nil
	}
	return fmt.Errorf("%w: its %d processes need %s to start (%s each), and /dev/shm has %s free of %s — give it more room (a container's --shm-size) or run fewer processes on the node",
		ErrNoSpace, nlocal, mib(need), mib(one), mib(free), mib(int64(st.Blocks)*st.Bsize))
}

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// Word is the 8-byte word at off in b, for atomic access.
func Word(b []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

// nameRE finds the creator's pid in a segment's name.
var nameRE = regexp.MustCompile(`-p([0-9]+)-[0-9a-f]+$`)

// Path is the name of the segment of world rank rank, process pid, of the
// job whose segments are named for prefix and key: its processes learn
// each other's pids, and one key, not each other's names.
func Path(prefix string, rank, pid int, key [8]byte) string {
	return filepath.Join("/dev/shm", fmt.Sprintf("%s-r%d-p%d-%x", prefix, rank, pid, key))
}

// Create makes this process's segment of rings rings (one for each
// other process the node may come to hold) of cells cells each, named
// Path(prefix, rank, this process's pid, key), with mode 0600, and maps it,
// with its header and join slots mapped in. It is made under another name
// and renamed once it is whole, so a peer that finds the name finds a
// segment. It first sweeps the segments of dead processes. The file stays
// open (f): a process that joins after the name is gone opens it through
// /proc/<pid>/fd.
func Create(prefix string, rank, rings, cells int, key [8]byte) (path string, seg []byte, f *os.File, err error) {
	if rings < 1 || rings > 1<<20 || cells < 1 || cells > 1<<20 {
		return "", nil, nil, fmt.Errorf("shared memory: a segment of %d rings of %d cells", rings, cells)
	}
	Sweep()
	path = Path(prefix, rank, os.Getpid(), key)
	// The name it is made under still carries the pid, for Sweep.
	tmp := Path(prefix+"-new", rank, os.Getpid(), key)
	f, err = os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", nil, nil, fmt.Errorf("shared memory: %w", err)
	}
	size := Size(rings, cells)
	fail := func(err error) (string, []byte, *os.File, error) {
		f.Close()
		os.Remove(tmp)
		return "", nil, nil, err
	}
	if err := f.Truncate(int64(size)); err != nil {
		return fail(fmt.Errorf("shared memory %s: %w", path, err))
	}
	seg, err = unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mapping %s: %w", path, os.NewSyscallError("mmap", err)))
	}
	if err := populate(seg, 0, headsOff(rings)); err != nil {
		unix.Munmap(seg)
		return fail(fmt.Errorf("shared memory %s: %w", path, err))
	}
	binary.LittleEndian.PutUint64(seg[WordRings:], uint64(rings))
	binary.LittleEndian.PutUint64(seg[WordCells:], uint64(cells))
	atomic.StoreUint64(Word(seg, WordMagic), Magic)
	// Not over a file of that name: it is no segment of this process's.
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE); err != nil {
		unix.Munmap(seg)
		return fail(fmt.Errorf("shared memory %s: %w", path, os.NewSyscallError("renameat2", err)))
	}
	return path, seg, f, nil
}

// Open maps a peer's segment and returns it with its number of rings and
// their length in cells. Only its header is mapped in at once; Join maps
// in the ring this process comes to write. The rest stays out of its page
// tables: every page mapped in is a page the kernel unmaps when the
// process exits, and with each process mapping every segment of the node
// a process killed on a busy node of eight took 2.5 ms to be torn down,
// which is most of the time until its peers learn of it (docs/ft.md).
func Open(path string) (seg []byte, rings, cells int, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	head, err := unix.Mmap(int(f.Fd()), 0, HeaderSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("mapping: %w", os.NewSyscallError("mmap", err))
	}
	magic := atomic.LoadUint64(Word(head, WordMagic))
	n, c := binary.LittleEndian.Uint64(head[WordRings:]), binary.LittleEndian.Uint64(head[WordCells:])
	unix.Munmap(head)
	if magic != Magic || n < 1 || n > 1<<20 || c < 1 || c > 1<<20 {
		return nil, 0, 0, fmt.Errorf("not a segment (magic %#x, %d rings of %d cells)", magic, n, c)
	}
	rings, cells = int(n), int(c)
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size < int64(Size(rings, cells)) {
		return nil, 0, 0, fmt.Errorf("not a segment of %d rings of %d cells (%d bytes, %v)", rings, cells, st.Size, err)
	}
	seg, err = unix.Mmap(int(f.Fd()), 0, Size(rings, cells), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("mapping: %w", os.NewSyscallError("mmap", err))
	}
	if err := populate(seg, 0, HeaderSize); err != nil {
		unix.Munmap(seg)
		return nil, 0, 0, err
	}
	return seg, rings, cells, nil
}

// populate maps in the pages of seg[from:to], writable, so that the
// first frames through them take no page faults. When the file system
// cannot give the pages (a full /dev/shm) it returns an error wrapping
// ErrNoSpace where a write would have raised SIGBUS. Before Linux 5.14
// (no MADV_POPULATE_WRITE) the pages are faulted in on first use instead.
func populate(seg []byte, from, to int) error {
	to = min(to, len(seg))
	if from >= to {
		return nil
	}
	return populateAt(uintptr(unsafe.Pointer(&seg[0])), from, to)
}

// populateAt is populate of the bytes from base+from to base+to, which
// lie in a mapping of a segment, rounded out to whole pages.
func populateAt(base uintptr, from, to int) error {
	page := uintptr(os.Getpagesize())
	lo := (base + uintptr(from)) &^ (page - 1)
	hi := (base + uintptr(to) + page - 1) &^ (page - 1)
	switch _, _, err := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_POPULATE_WRITE); err {
	case 0, unix.EINVAL:
		return nil
	case unix.EFAULT, unix.ENOMEM, unix.ENOSPC:
		return fmt.Errorf("%w: %s of it could not be mapped in (%v)", ErrNoSpace, mib(int64(hi-lo)), err)
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
