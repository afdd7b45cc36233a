package fabric

import (
	"fmt"
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
}

type memRegion struct {
	mem    *verbs.Memory
	mr     *verbs.MR
	lo, hi uintptr
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// lookup returns the registration covering b and b's offset in it: nil
// when b is not AllocMem memory (or is empty).
func (m *memRegistry) lookup(pd *verbs.PD, b []byte) (*verbs.MR, uint64, error) {
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
	return r
}

func (m *memRegistry) add(mem *verbs.Memory) {
	b := mem.Bytes()
	r := &memRegion{mem: mem, lo: addrOf(b), hi: addrOf(b) + uintptr(len(b))}
	i, _ := slices.BinarySearchFunc(m.regions, r.lo, func(r *memRegion, p uintptr) int {
		if r.lo < p {
			return -1
		}
		return 1
	})
	m.regions = slices.Insert(m.regions, i, r)
}

func (m *memRegistry) remove(b []byte) error {
	p := addrOf(b)
	for i, r := range m.regions {
		if r.lo == p && len(b) == r.mem.Len() {
			if r.mr != nil {
				if err := r.mr.Close(); err != nil {
					return err
				}
			}
			if err := r.mem.Close(); err != nil {
				return err
			}
			m.regions = slices.Delete(m.regions, i, i+1)
			return nil
		}
	}
	return fmt.Errorf("%w: FreeMem of memory AllocMem did not return", ErrInvalid)
}

// deregister drops every registration (the provider is closing); the
// memory stays the caller's until FreeMem.
func (m *memRegistry) deregister() {
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
	mem, err := verbs.AllocMemory(n)
	if err != nil {
		return nil, fmt.Errorf("fabric: AllocMem: %w", err)
	}
	ep.e.mu.Lock()
	ep.mem.add(mem)
	ep.e.mu.Unlock()
	return mem.Bytes(), nil
}

// FreeMem unmaps memory from AllocMem (MPI_Free_mem). No operation may
// still be using it; b must be the whole slice AllocMem returned.
func (ep *Endpoint) FreeMem(b []byte) error {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	return ep.mem.remove(b)
}
