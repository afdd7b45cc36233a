//go:build linux

package verbs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestHostSharedMemory: AllocSharedMemory's pages, mapped again through
// /proc/self/fd as another process would, are the same pages; Close
// unmaps and closes the file; bad mappings are ErrInvalid.
func TestHostSharedMemory(t *testing.T) {
	m, err := AllocSharedMemory(10000)
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != 10000 || m.File() == nil {
		t.Fatalf("len %d, file %v", m.Len(), m.File())
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", m.File().Fd()), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := MapMemoryFile(f, 4096, 100)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	m.Bytes()[4096+7] = 42
	v.Bytes()[9] = 43
	if v.Bytes()[7] != 42 || m.Bytes()[4096+9] != 43 {
		t.Fatal("the two mappings are not the same pages")
	}
	if v.File() != nil {
		t.Fatal("a mapping of another's file owns no file")
	}
	fd := m.File().Fd()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil && strings.HasPrefix(target, "/memfd:rivet") {
		t.Fatal("Close left the memory file open")
	}
	for _, c := range []struct{ off, size int }{{1, 8}, {0, 0}, {-4096, 8}} {
		if _, err := MapMemoryFile(os.Stdin, int64(c.off), c.size); !errors.Is(err, ErrInvalid) {
			t.Errorf("MapMemoryFile(%d, %d): %v", c.off, c.size, err)
		}
	}
	if _, err := AllocSharedMemory(0); !errors.Is(err, ErrInvalid) {
		t.Errorf("AllocSharedMemory(0): %v", err)
	}
}
