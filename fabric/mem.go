//go:build linux

package fabric

import (
	"fmt"
	"os"
	"slices"
	"unsafe"

	"github.com/rivet-hpc/rivet/verbs"
)

// memRegistry is the memory AllocMem handed out: mmapped, so the Go
// runtime never moves or frees it, and so the only memory the fabric lets
// a NIC touch in place. Each region is registered with the verbs
// provider the first time a message uses it, and stays registered — the
// registration cache — until FreeMem or Close. Guarded by the engine's
// lock.
type memRegistry struct {
	regions []*memRegion // sorted by address
	last    *memRegion   // the region find found last: a loop's buffers are mostly one
}

type memRegion struct {
	mem    *verbs.Memory
	mr     *verbs.MR
	lo, hi uintptr
	user   []byte // the slice handed out: all of mem, or MapLocal's part
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Lookup returns the registration covering b and b's offset in it: nil
// when b is not AllocMem memory (or is empty). It is rdma.Registry's.
func (m *memRegistry) Lookup(pd *verbs.PD, b []byte) (*verbs.MR, uint64, error) {
	r := m.find(b)
	if r == nil {
		return nil, 0, nil
	}
	if r.mr == nil {
		mr, err := pd.Register(r.mem, verbs.AccessAll)
		if err != nil {
			return nil, 0, fmt.Errorf("fabric: registering %d bytes: %w", r.mem.Len(), err)
		}
		r.mr = mr
	}
	return r.mr, uint64(addrOf(b) - r.lo), nil
}

// find returns the region that holds all of b, or nil.
func (m *memRegistry) find(b []byte) *memRegion {
	if len(b) == 0 {
		return nil
	}
	p := addrOf(b)
	if r := m.last; r != nil && p >= r.lo && p+uintptr(len(b)) <= r.hi {
		return r
	}
	i, _ := slices.BinarySearchFunc(m.regions, p, func(r *memRegion, p uintptr) int {
		switch {
		case r.hi <= p:
			return -1
		case r.lo > p:
			return 1
		}
		return 0
	})
	if i == len(m.regions) {
		return nil
	}
	r := m.regions[i]
	if p < r.lo || p+uintptr(len(b)) > r.hi {
		return nil
	}
	m.last = r
	return r
}

func (m *memRegistry) add(mem *verbs.Memory, user []byte) {
	b := mem.Bytes()
	r := &memRegion{mem: mem, lo: addrOf(b), hi: addrOf(b) + uintptr(len(b)), user: user}
	i, _ := slices.BinarySearchFunc(m.regions, r.lo, func(r *memRegion, p uintptr) int {
		if r.lo < p {
			return -1
		}
		return 1
	})
	m.regions = slices.Insert(m.regions, i, r)
	m.last = nil
}

func (m *memRegistry) remove(b []byte) error {
	p := addrOf(b)
	for i, r := range m.regions {
		if addrOf(r.user) == p && len(b) == len(r.user) {
			if r.mr != nil {
				if err := r.mr.Close(); err != nil {
					return err
				}
			}
			if err := r.mem.Close(); err != nil {
				return err
			}
			m.regions = slices.Delete(m.regions, i, i+1)
			m.last = nil
			return nil
		}
	}
	return fmt.Errorf("%w: FreeMem of memory neither AllocMem nor MapLocal returned", ErrInvalid)
}

// Deregister drops every registration (the provider is closing); the
// memory stays the caller's until FreeMem. It is rdma.Registry's.
func (m *memRegistry) Deregister() {
	for _, r := range m.regions {
		if r.mr != nil {
			r.mr.Close()
			r.mr = nil
		}
	}
}

// AllocMem returns n bytes of zeroed memory that the fabric moves without
// copies (MPI_Alloc_mem): the verbs provider registers it once with the
// NIC and reads and writes it in place, where other buffers are staged
// through registered ones. It is mmapped memory, outside Go's heap; hand
// it back with FreeMem. It works with every provider.
func (ep *Endpoint) AllocMem(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: AllocMem(%d)", ErrInvalid, n)
	}
	// The region (and its registration) extends to a multiple of 8 bytes,
	// so that the aligned 8-byte word holding any byte of b can be the
	// operand of a CPU or NIC atomic (rma's accumulates on short windows).
	mem, err := verbs.AllocSharedMemory((n + 7) &^ 7)
	if err != nil {
		return nil, fmt.Errorf("fabric: AllocMem: %w", err)
	}
	b := mem.Bytes()[:n]
	ep.e.mu.Lock()
	ep.mem.add(mem, b)
	ep.e.mu.Unlock()
	return b, nil
}

// LocalMem names memory from AllocMem for the processes on this node,
// which map it with MapLocal and then load, store and run CPU atomics on
// the same pages (as MPI_Win_allocate_shared's peers do). It is plain
// data, for sending to them.
type LocalMem struct {
	PID, FD  int32  // the exposing process and its descriptor of the memory
	Off, Len uint64 // the part exposed
}

// ExposeLocal describes b, memory from AllocMem (or a part of it), for
// MapLocal in the other processes of this node. b stays mappable until
// FreeMem.
func (ep *Endpoint) ExposeLocal(b []byte) (LocalMem, error) {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	r := ep.mem.find(b)
	if r == nil || r.mem.File() == nil {
		return LocalMem{}, fmt.Errorf("%w: ExposeLocal: memory not from AllocMem (or empty)", ErrInvalid)
	}
	return LocalMem{PID: int32(os.Getpid()), FD: int32(r.mem.File().Fd()), Off: uint64(addrOf(b) - r.lo), Len: uint64(len(b))}, nil
}

// MapLocal maps memory another process of this node exposed with
// ExposeLocal. The result behaves as AllocMem's memory — Expose makes it
// reachable over verbs, through this process's own registration of the
// shared pages — and FreeMem unmaps it. The exposing process must keep
// the memory until MapLocal returns.
func (ep *Endpoint) MapLocal(m LocalMem) ([]byte, error) {
	if m.Len == 0 || m.Len > 1<<46 {
		return nil, fmt.Errorf("%w: MapLocal of %d bytes", ErrInvalid, m.Len)
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", m.PID, m.FD), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("fabric: MapLocal: %w", err)
	}
	defer f.Close()
	page := uint64(os.Getpagesize())
	at := m.Off &^ (page - 1)
	mem, err := verbs.MapMemoryFile(f, int64(at), int(m.Off-at+m.Len))
	if err != nil {
		return nil, fmt.Errorf("fabric: MapLocal: %w", err)
	}
	b := mem.Bytes()[m.Off-at:]
	ep.e.mu.Lock()
	ep.mem.add(mem, b)
	ep.e.mu.Unlock()
	return b, nil
}

// FreeMem unmaps memory from AllocMem (MPI_Free_mem). No operation may
// still be using it; b must be the whole slice AllocMem returned.
func (ep *Endpoint) FreeMem(b []byte) error {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	return ep.mem.remove(b)
}
