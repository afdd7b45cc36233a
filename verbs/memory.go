//go:build linux

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
	file     *os.File // the memory file behind a shared mapping, or nil
	lifetime          // children: registrations
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

// Close unmaps the region (and closes its memory file, if any). It fails
// with ErrBusy while a memory region registered over it is open.
func (m *Memory) Close() error {
	return m.close("registrations are", func() error { return unix.Munmap(m.b[:cap(m.b)]) }, func() error {
		if m.file != nil {
			return m.file.Close()
		}
		return nil
	})
}

// AllocSharedMemory is AllocMemory backed by an anonymous memory file
// (memfd_create): the same zeroed, page-aligned, never-moved memory, which
// other processes on the machine can map too (File, MapMemoryFile), so
// that they load, store and run CPU atomics on the very pages a device
// reads and writes.
func AllocSharedMemory(size int) (*Memory, error) {
	if size <= 0 {
		return nil, invalid("memory size %d", size)
	}
	fd, err := unix.MemfdCreate("rivet", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("verbs: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:rivet")
	page := os.Getpagesize()
	n := (size + page - 1) / page * page
	if err := f.Truncate(int64(n)); err != nil {
		f.Close()
		return nil, fmt.Errorf("verbs: sizing shared memory: %w", err)
	}
	m, err := MapMemoryFile(f, 0, size)
	if err != nil {
		f.Close()
		return nil, err
	}
	m.file = f
	return m, nil
}

// MapMemoryFile maps size bytes of f from byte off, a multiple of the page
// size, shared with every other mapping of f — typically another
// process's AllocSharedMemory, opened through /proc/PID/fd. The mapping
// may be registered like AllocMemory's. Close unmaps it; f stays the
// caller's.
func MapMemoryFile(f *os.File, off int64, size int) (*Memory, error) {
	page := os.Getpagesize()
	if size <= 0 || off < 0 || off%int64(page) != 0 {
		return nil, invalid("mapping %d bytes at offset %d", size, off)
	}
	n := (size + page - 1) / page * page
	b, err := unix.Mmap(int(f.Fd()), off, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("verbs: mmap %d bytes of %s: %w", n, f.Name(), err)
	}
	if err := unix.Madvise(b, unix.MADV_DONTFORK); err != nil {
		unix.Munmap(b)
		return nil, fmt.Errorf("verbs: madvise: %w", err)
	}
	return &Memory{b: b[:size:n], lifetime: lifetime{kind: "memory"}}, nil
}

// File returns the memory file behind AllocSharedMemory's memory, or nil.
// It is m's: it stays open until Close.
func (m *Memory) File() *os.File { return m.file }
