//go:build linux

package shmseg

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCreateOpen: a created segment opens for the same number of
// processes and is refused for another; its rings and staging area lie
// inside it, apart.
func TestCreateOpen(t *testing.T) {
	path, seg, err := Create("rivet-shmseg-test", 0, 3, [8]byte{1})
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	defer unix.Munmap(seg)
	if len(seg) != Size(3) {
		t.Errorf("segment of %d bytes, want %d", len(seg), Size(3))
	}
	peer, err := Open(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	unix.Munmap(peer)
	if _, err := Open(path, 4); err == nil || !strings.Contains(err.Error(), "not a segment for 4 processes") {
		t.Errorf("opened for 4 processes: %v", err)
	}
	last := RingAt(seg, 2, Cells(3))
	// The last ring's cells end where the staging area starts: cap runs
	// from its first cell to the segment's end.
	if tail := cap(last.Cells) - len(last.Cells); tail != Size(3)-StageOff(3) {
		t.Errorf("after the last ring: %d bytes, want the staging area's %d", tail, Size(3)-StageOff(3))
	}
	if CellsFor(0) != 1 || CellsFor(CellSize-CellHeader) != 1 || CellsFor(CellSize-CellHeader+1) != 2 {
		t.Error("CellsFor miscounts")
	}
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
