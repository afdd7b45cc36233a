//go:build linux

package verbs

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// PD is a protection domain (ibv_pd): memory regions and queue pairs in one
// PD may be used together.
type PD struct {
	ctx      *Context
	handle   uint32
	lifetime // children: MRs and QPs
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	if err := c.acquire(); err != nil {
		return nil, err
	}
	h, err := c.uv.AllocPD()
	if err != nil {
		c.release()
		return nil, c.wrap(err)
	}
	return &PD{ctx: c, handle: h, lifetime: lifetime{kind: "PD"}}, nil
}

// Close deallocates the PD; its MRs and QPs must be closed first (ErrBusy).
func (pd *PD) Close() error {
	return pd.close("memory regions or queue pairs are",
		func() error { return pd.ctx.wrapIf(pd.ctx.uv.DeallocPD(pd.handle)) },
		func() error { pd.ctx.release(); return nil })
}

// Access says what a memory region or queue pair allows (ibv_access_flags).
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1
	AccessRemoteWrite  Access = 2
	AccessRemoteRead   Access = 4
	AccessRemoteAtomic Access = 8
	// AccessAll is every access the device grants: what most memory a peer
	// writes, reads and updates needs.
	AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

// MR is a registered memory region (ibv_mr).
type MR struct {
	pd     *PD
	mem    *Memory
	owned  bool // mem was allocated by Alloc and is unmapped by Close
	handle uint32
	lkey   uint32
	rkey   uint32
	addr   uint64
	length uint64
	access Access
	closed atomic.Bool
	mu     sync.Mutex
}

// Register registers all of mem with the device. Remote access needs local
// write too, as in ibverbs.
func (pd *PD) Register(mem *Memory, access Access) (*MR, error) {
	if mem == nil {
		return nil, invalid("nil memory")
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, invalid("remote write or atomic access needs local write access")
	}
	if access&^AccessAll != 0 {
		return nil, invalid("access flags %#x", uint32(access))
	}
	if err := pd.acquire(); err != nil {
		return nil, err
	}
	if err := mem.acquire(); err != nil {
		pd.release()
		return nil, err
	}
	addr := uint64(uintptr(unsafe.Pointer(&mem.b[0])))
	r, err := pd.ctx.uv.RegMR(pd.handle, addr, uint64(len(mem.b)), addr, uint32(access))
	if err != nil {
		mem.release()
		pd.release()
		return nil, pd.ctx.wrap(err)
	}
	return &MR{pd: pd, mem: mem, handle: r.MRHandle, lkey: r.LKey, rkey: r.RKey, addr: addr, length: uint64(len(mem.b)), access: access}, nil
}

// Alloc maps size bytes and registers them: the MR owns the memory and
// Close unmaps it.
func (pd *PD) Alloc(size int, access Access) (*MR, error) {
	mem, err := AllocMemory(size)
	if err != nil {
		return nil, err
	}
	mr, err := pd.Register(mem, access)
	if err != nil {
		mem.Close()
		return nil, err
	}
	mr.owned = true
	return mr, nil
}

// Bytes returns the registered memory.
func (mr *MR) Bytes() []byte { return mr.mem.b }

// LKey is the local key, for scatter/gather entries.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey is the remote key a peer needs to access the region.
func (mr *MR) RKey() uint32 { return mr.rkey }

// Addr is the address of the region's first byte, as peers address it.
func (mr *MR) Addr() uint64 { return mr.addr }

// Len is the region's length.
func (mr *MR) Len() int { return int(mr.length) }

// Remote describes the region for a peer: [Addr, Addr+Len) under RKey.
func (mr *MR) Remote() RemoteBuf { return RemoteBuf{Addr: mr.addr, RKey: mr.rkey, Len: mr.length} }

// Close deregisters the region (and unmaps it if Alloc made it).
func (mr *MR) Close() error {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.closed.Load() {
		return nil
	}
	if err := mr.pd.ctx.uv.DeregMR(mr.handle); err != nil {
		return mr.pd.ctx.wrap(err)
	}
	mr.closed.Store(true)
	mr.mem.release()
	mr.pd.release()
	if mr.owned {
		return mr.mem.Close()
	}
	return nil
}

// RemoteBuf is a peer's registered memory: what RDMA read, write and
// atomics target. Peers exchange it out of band.
type RemoteBuf struct {
	Addr uint64
	RKey uint32
	Len  uint64
}

// At returns the address off bytes into the buffer.
func (r RemoteBuf) At(off uint64) RemoteBuf {
	return RemoteBuf{Addr: r.Addr + off, RKey: r.RKey, Len: r.Len - min(off, r.Len)}
}
