//go:build linux

package shmseg

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestCreateOpen: a created segment opens — by its path, or through
// /proc/<pid>/fd once the name is gone — with its number of rings and
// their length; something else does not; its rings and staging area lie
// inside it, apart.
func TestCreateOpen(t *testing.T) {
	cells := Cells(3)
	path, seg, f, err := Create("rivet-shmseg-test", 0, 3, cells, [8]byte{1})
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	defer f.Close()
	defer unix.Munmap(seg)
	if len(seg) != Size(3, cells) {
		t.Errorf("segment of %d bytes, want %d", len(seg), Size(3, cells))
	}
	peer, rings, got, err := Open(path)
	if err != nil || rings != 3 || got != cells {
		t.Fatalf("open: %d rings of %d cells, %v", rings, got, err)
	}
	unix.Munmap(peer)
	os.Remove(path)
	peer, _, _, err = Open("/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		t.Fatalf("open through /proc: %v", err)
	}
	unix.Munmap(peer)
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, make([]byte, HeaderSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := Open(other); err == nil || !strings.Contains(err.Error(), "not a segment") {
		t.Errorf("opened a file of zeros: %v", err)
	}
	last := RingAt(seg, 3, 2, cells)
	// The last ring's cells end where the staging area starts: cap runs
	// from its first cell to the segment's end.
	if tail := cap(last.Cells) - len(last.Cells); tail != Size(3, cells)-StageOff(3, cells) {
		t.Errorf("after the last ring: %d bytes, want the staging area's %d", tail, Size(3, cells)-StageOff(3, cells))
	}
	if CellsFor(0) != 1 || CellsFor(CellSize-CellHeader) != 1 || CellsFor(CellSize-CellHeader+1) != 2 {
		t.Error("CellsFor miscounts")
	}
}

// TestPath: a segment's name says whose it is — the creator's pid, as
// Sweep reads it — and is what Create makes.
func TestPath(t *testing.T) {
	key := [8]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4}
	path, seg, f, err := Create("rivet-shmseg-path", 3, 2, Cells(2), key)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	defer f.Close()
	defer unix.Munmap(seg)
	if want := Path("rivet-shmseg-path", 3, os.Getpid(), key); path != want {
		t.Errorf("created %s, Path says %s", path, want)
	}
	if m := nameRE.FindStringSubmatch(path); m == nil || m[1] != strconv.Itoa(os.Getpid()) {
		t.Errorf("%s: no pid for Sweep (%q)", path, m)
	}
	if Orphaned(path) {
		t.Errorf("%s: a live process's segment taken for an orphan", path)
	}
}

// TestCells: rings are 1 MiB up to 5 processes, the rings of a process
// never exceed RingBudget together unless they are as short as they get,
// and a ring holds the largest eager frame (16 KiB of payload) with room
// to spare.
func TestCells(t *testing.T) {
	for _, c := range []struct{ n, bytes int }{{1, 1 << 20}, {2, 1 << 20}, {5, 1 << 20}, {6, 512 << 10}, {17, 256 << 10}, {18, 128 << 10}, {128, MinRing}, {256, MinRing}} {
		if got := Cells(c.n) * CellSize; got != c.bytes {
			t.Errorf("Cells(%d): rings of %d bytes, want %d", c.n, got, c.bytes)
		}
	}
	for n := 2; n <= 513; n++ {
		b := Cells(n) * CellSize
		if b > MinRing && b*(n-1) > RingBudget {
			t.Errorf("%d processes: rings of %d bytes, %d together", n, b, b*(n-1))
		}
		if CellsFor(16<<10) >= Cells(n) {
			t.Errorf("%d processes: a 16 KiB frame fills the ring", n)
		}
	}
}

// TestJoin: a segment is mapped in only where it is used. Its owner's:
// the header and join slots from the start; a ring once a sender claims
// it; the staging area once its owner stages. A peer's: the header, then
// the ring it claims — so that its exit has fewer pages to unmap. Claims
// come in order, name their writer, and end when the rings are taken.
func TestJoin(t *testing.T) {
	const n = 8
	cells := Cells(n)
	path, seg, f, err := Create("rivet-shmseg-test", 0, n, cells, [8]byte{2})
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	defer f.Close()
	defer unix.Munmap(seg)
	page := os.Getpagesize()
	pages := func(from, to int) int { return ((to+page-1)/page - from/page) * page }
	start := pages(0, int(StartBytes(n)))
	if got := rss(t, seg); got != start {
		t.Errorf("new segment: %d bytes mapped in, want %d (header, join slots)", got, start)
	}
	if StartBytes(n) != int64(headsOff(n)) {
		t.Errorf("StartBytes %d, heads start at %d", StartBytes(n), headsOff(n))
	}
	peer, rings, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(peer)
	if got := rss(t, peer); got != pages(0, HeaderSize) {
		t.Errorf("peer's mapping: %d bytes mapped in, want the header's %d", got, pages(0, HeaderSize))
	}
	if Joined(seg) != 0 {
		t.Fatalf("%d rings claimed in a new segment", Joined(seg))
	}
	ring, err := Join(peer, rings, cells, 5)
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := Writer(seg, 0); Joined(seg) != 1 || !ok || w != 5 {
		t.Errorf("after world rank 5 joined: %d claimed, ring 0 written by %d (%v)", Joined(seg), w, ok)
	}
	from := ringOff(n, 0, cells)
	end := from + len(ring.Cells)
	if from%page != 0 || headOff(n, 0) >= ringsOff(n) || headOff(n, n-1)+HeadSize > ringsOff(n) {
		t.Errorf("ring 0's cells at %d, heads at %d–%d, cells from %d", from, headOff(n, 0), headOff(n, n-1)+HeadSize, ringsOff(n))
	}
	// The header, its join slot's page, its head's page, and the ring's
	// first page.
	want := pages(0, HeaderSize) + 3*page
	if got := rss(t, peer); got != want || JoinCells(cells)*CellSize != page {
		t.Errorf("peer's mapping after its join: %d bytes mapped in, want %d (header, its join slot, its head, ring 0's first page)", got, want)
	}
	if err := ring.Populate(cells-1, cells); err != nil {
		t.Fatal(err)
	}
	want += page
	// The pages mapped in are ring 0's: writing its head and its last
	// byte maps in nothing more.
	ring.Head.Store(7)
	ring.Cells[len(ring.Cells)-1] = 1
	if got := rss(t, peer); got != want {
		t.Errorf("after writing ring 0: %d bytes mapped in, want still %d", got, want)
	}
	if got := RingAt(seg, n, 0, cells); got.Head.Load() != 7 || got.Cells[len(got.Cells)-1] != 1 {
		t.Error("the owner does not see what the peer wrote in ring 0")
	}
	if err := PopulateStage(seg, n, cells); err != nil {
		t.Fatal(err)
	}
	// The owner has read the ring's head and last page (and the kernel
	// may have mapped in more of the ring's around them); nothing of
	// the rings no one claimed.
	if got, lo, hi := rss(t, seg), start+2*page+StageBytes, start+page+pages(from, end)+StageBytes; got < lo || got > hi {
		t.Errorf("own segment after a join and staging: %d bytes mapped in, want %d to %d", got, lo, hi)
	}
	for w := 1; w < n; w++ {
		if _, err := Join(peer, rings, cells, w); err != nil {
			t.Fatalf("join %d: %v", w, err)
		}
	}
	if _, err := Join(peer, rings, cells, 9); err == nil || !strings.Contains(err.Error(), "rings of the segment are taken") {
		t.Errorf("a join past the last ring: %v", err)
	}
	if w, _ := Writer(seg, n-1); w != n-1 {
		t.Errorf("ring %d written by %d, want %d", n-1, w, n-1)
	}
}

// rss is how much of mapping b this process's page tables hold, from
// /proc/self/smaps.
func rss(t *testing.T, b []byte) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	start := strconv.FormatUint(uint64(uintptr(unsafe.Pointer(&b[0]))), 16)
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = strings.HasPrefix(f[0], start+"-")
			continue
		}
		if v, ok := strings.CutPrefix(l, "Rss:"); in && ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", start)
	return 0
}

// TestSweep removes a segment whose creator is dead and keeps one whose
// creator lives.
func TestSweep(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join("/dev/shm", "rivet-sweep-test-r0-p"+strconv.Itoa(cmd.Process.Pid)+"-00")
	live := filepath.Join("/dev/shm", "rivet-sweep-test-r0-p"+strconv.Itoa(os.Getpid())+"-00")
	for _, p := range []string{dead, live} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
	}
	Sweep()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead process's segment survived: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live process's segment was swept: %v", err)
	}
}
