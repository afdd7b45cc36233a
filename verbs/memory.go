package verbs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Memory is a page-aligned region from mmap: memory the Go runtime will
// never move or free, and so the only kind Rivet lets a device access.
type Memory struct {
	b        []byte
	lifetime // children: registrations
}

// AllocMemory maps size bytes (rounded up to whole pages) of zeroed memory.
// It is excluded from fork (MADV_DONTFORK), as registered memory must be.
func AllocMemory(size int) (*Memory, error) {
	if size <= 0 {
		return nil, invalid("memory size %d", size)
	}
	page := os.Getpagesize()
	n := (size + page - 1) / page * page
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("verbs: mmap %d bytes: %w", n, err)
	}
	if err := unix.Madvise(b, unix.MADV_DONTFORK); err != nil {
		unix.Munmap(b)
		return nil, fmt.Errorf("verbs: madvise: %w", err)
	}
	return &Memory{b: b[:size:n], lifetime: lifetime{kind: "memory"}}, nil
}

// Bytes returns the region. It stays valid until Close.
func (m *Memory) Bytes() []byte { return m.b }

// Len is the region's size in bytes.
func (m *Memory) Len() int { return len(m.b) }

// Close unmaps the region. It fails with ErrBusy while a memory region
// registered over it is open.
func (m *Memory) Close() error {
	return m.close("registrations are", func() error { return unix.Munmap(m.b[:cap(m.b)]) }, nil)
}
