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

// TestCreateOpen: a created segment opens for the same number of rings
// — by its path, or through /proc/<pid>/fd once the name is gone — with
// its ring length, and is refused for another number or a ring past the
// end; its rings and staging area lie inside it, apart.
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
	peer, got, err := Open(path, 3, 1)
	if err != nil || got != cells {
		t.Fatalf("open: %d cells, %v", got, err)
	}
	unix.Munmap(peer)
	os.Remove(path)
	peer, _, err = Open("/proc/"+strconv.Itoa(os.Getpid())+"/fd/"+strconv.Itoa(int(f.Fd())), 3, 2)
	if err != nil {
		t.Fatalf("open through /proc: %v", err)
	}
	unix.Munmap(peer)
	for _, c := range []struct{ rings, ix int }{{4, 1}, {3, 3}, {3, -1}} {
		if _, _, err := Open("/proc/"+strconv.Itoa(os.Getpid())+"/fd/"+strconv.Itoa(int(f.Fd())), c.rings, c.ix); err == nil || !strings.Contains(err.Error(), "not a segment of") {
			t.Errorf("opened as %d rings for ring %d: %v", c.rings, c.ix, err)
		}
	}
	last := RingAt(seg, 2, cells)
	// The last ring's cells end where the staging area starts: cap runs
	// from its first cell to the segment's end.
	if tail := cap(last.Cells) - len(last.Cells); tail != Size(3, cells)-StageOff(3, cells) {
		t.Errorf("after the last ring: %d bytes, want the staging area's %d", tail, Size(3, cells)-StageOff(3, cells))
	}
	if CellsFor(0) != 1 || CellsFor(CellSize-CellHeader) != 1 || CellsFor(CellSize-CellHeader+1) != 2 {
		t.Error("CellsFor miscounts")
	}
}

// TestOpenMapsWhatItUses: a segment is mapped in only where it is used:
// its owner's, the header, the staging area and the rings PopulateRing
// names (those of peers that exist); a peer's, where the opening process
// will touch it — the header, the ring it writes, the staging area — so
// that its exit has fewer pages to unmap.
func TestOpenMapsWhatItUses(t *testing.T) {
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
	ringAt := func(ix int) int { return HeaderSize + ix*(RingHeader+cells*CellSize) }
	PopulateRing(seg, 5, cells)
	if got, want := rss(t, seg), pages(0, HeaderSize)+pages(ringAt(5), ringAt(6))+pages(StageOff(n, cells), Size(n, cells)); got != want {
		t.Errorf("own segment: %d bytes mapped in, want %d (header, ring 5, staging area)", got, want)
	}
	peer, _, err := Open(path, n, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(peer)
	ring := RingAt(peer, 3, cells)
	from := ringAt(3)
	want := pages(0, HeaderSize) + pages(from, from+RingHeader+len(ring.Cells)) + pages(StageOff(n, cells), Size(n, cells))
	if got := rss(t, peer); got != want {
		t.Errorf("peer's segment: %d bytes mapped in, want %d (header, ring 3, staging area)", got, want)
	}
	// The pages mapped in are ring 3's: writing its first and last bytes
	// maps in nothing more.
	ring.Head.Store(7)
	ring.Cells[len(ring.Cells)-1] = 1
	if got := rss(t, peer); got != want {
		t.Errorf("after writing ring 3: %d bytes mapped in, want still %d", got, want)
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
