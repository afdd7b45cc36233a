//go:build linux

package rma

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/rivet-hpc/rivet/fabric"
)

// Dynamic windows. Each process keeps the table of the memory it has
// attached in its control memory, after the control words: a count of
// changes, then dynSlots entries. An origin names target memory by its
// address (Address, MPI_Get_address), reads the target's table — a load
// on this node, one RDMA read otherwise — and keeps it until its next
// synchronization call, so a region detached since is found missing
// then. The target takes no part in any of it.
const (
	dynSlots     = 64
	dynEntry     = 48 // addr, len, key|pid, fd|_, off, used
	dynTableSize = 8 + dynSlots*dynEntry
)

type dynRegion struct {
	addr, len uint64
	key       uint32
	local     fabric.LocalMem
	data      []byte           // mapped here (targets sharing memory)
	rdata     fabric.RemoteMem // how the NIC reaches it
}

// dynState is a dynamic window's knowledge: this process's attached
// regions, and per target the table last read and when.
type dynState struct {
	mine   []dynRegion
	tables [][]dynRegion
	seen   []uint64 // the synchronization count at each table's read
	syncs  uint64   // synchronization calls so far
	maps   map[fabric.LocalMem][]byte
	tbl    []byte // registered memory a remote table is read into
	tmp    target
}

// CreateDynamic makes a window with no memory (MPI_Win_create_dynamic):
// each process attaches memory later with Attach, and origins name it
// by the address Address gives. It is collective over c.
func CreateDynamic(ctx context.Context, c *fabric.Comm, info Info) (*Window, error) {
	return create(ctx, c, FlavorDynamic, nil, 0, 1, info)
}

func (w *Window) table() []byte { return w.ctl[ctlSize(w.n):] }

// Attach makes b, memory from fabric.Endpoint.AllocMem, reachable
// through the dynamic window (MPI_Win_attach). It is local.
func (w *Window) Attach(b []byte) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.flavor != FlavorDynamic {
		return fmt.Errorf("%w: Attach on a %v window", fabric.ErrInvalid, w.flavor)
	}
	if len(w.dyn.mine) == dynSlots {
		return fmt.Errorf("%w: more than %d regions attached", fabric.ErrInvalid, dynSlots)
	}
	// Origins reach the region padded to 8 bytes (its last word is an
	// atomic's operand); memory whose padding is not its own is refused.
	if len(padded(b))%8 != 0 {
		return fmt.Errorf("%w (Attach of %d bytes whose capacity ends before the next multiple of 8)", ErrMemory, len(b))
	}
	lm, err := w.ep.ExposeLocal(padded(b))
	if err != nil {
		return fmt.Errorf("%w (Attach of %d bytes)", ErrMemory, len(b))
	}
	d := dynRegion{addr: uint64(uintptr(unsafe.Pointer(&b[0]))), len: uint64(len(b)), local: lm, data: b}
	for _, m := range w.dyn.mine {
		if d.addr < m.addr+m.len && m.addr < d.addr+d.len {
			return fmt.Errorf("%w: Attach of memory that overlaps attached memory", fabric.ErrInvalid)
		}
	}
	if w.nic {
		rm, err := w.ep.Expose(padded(b))
		if err != nil {
			return err
		}
		d.key = rm.Key
	}
	w.dyn.mine = append(w.dyn.mine, d)
	w.writeTable()
	return nil
}

// Detach ends the reach of memory Attach attached (MPI_Win_detach).
func (w *Window) Detach(b []byte) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if len(b) > 0 {
		a := uint64(uintptr(unsafe.Pointer(&b[0])))
		for i, m := range w.dyn.mine {
			if m.addr == a && m.len == uint64(len(b)) {
				w.dyn.mine = append(w.dyn.mine[:i], w.dyn.mine[i+1:]...)
				w.writeTable()
				return nil
			}
		}
	}
	return fmt.Errorf("%w: Detach of memory that is not attached", fabric.ErrInvalid)
}

// Address is the displacement that names b in a dynamic window
// (MPI_Get_address): send it to the origins.
func Address(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(uintptr(unsafe.Pointer(&b[0])))
}

func (w *Window) writeTable() {
	t := w.table()
	clear(t[8:])
	for i, m := range w.dyn.mine {
		e := t[8+i*dynEntry:]
		ne.PutUint64(e, m.addr)
		ne.PutUint64(e[8:], m.len)
		ne.PutUint32(e[16:], m.key)
		ne.PutUint32(e[20:], uint32(m.local.PID))
		ne.PutUint32(e[24:], uint32(m.local.FD))
		ne.PutUint64(e[32:], m.local.Off)
		e[40] = 1
	}
	ne.PutUint64(t, ne.Uint64(t)+1)
}

// dynAccess finds the region of target r's table that holds n bytes at
// address addr, reading the table again once per synchronization.
func (w *Window) dynAccess(ctx context.Context, r int, addr, n uint64) (*target, uint64, error) {
	d := &w.dyn
	if d.tables == nil {
		d.tables, d.seen = make([][]dynRegion, w.n), make([]uint64, w.n)
		for i := range d.seen {
			d.seen[i] = ^uint64(0)
		}
	}
	if d.seen[r] != d.syncs {
		if err := w.readTable(ctx, r); err != nil {
			return nil, 0, err
		}
	}
	for i := range d.tables[r] {
		g := &d.tables[r][i]
		if addr >= g.addr && n <= g.len && addr-g.addr <= g.len-n {
			if err := w.reach(r, g); err != nil {
				return nil, 0, err
			}
			d.tmp = w.targets[r]
			d.tmp.data, d.tmp.rdata, d.tmp.size = g.data, g.rdata, g.len
			return &d.tmp, addr - g.addr, nil
		}
	}
	return nil, 0, fmt.Errorf("%w: %d bytes at address %#x are not attached at rank %d", ErrRange, n, addr, r)
}

// readTable reads target r's table of attached regions.
func (w *Window) readTable(ctx context.Context, r int) error {
	t := &w.targets[r]
	var src []byte
	if t.local {
		src = t.ctl[ctlSize(w.n):]
	} else {
		if w.dyn.tbl == nil {
			b, err := w.alloc(dynTableSize)
			if err != nil {
				return err
			}
			w.dyn.tbl = b
		}
		if err := w.ep.Get(ctx, t.nicRank, t.rcl, uint64(ctlSize(w.n)), w.dyn.tbl); err != nil {
			return err
		}
		if err := w.ep.Flush(ctx, t.nicRank); err != nil {
			return err
		}
		src = w.dyn.tbl
	}
	regs := w.dyn.tables[r][:0]
	for i := range dynSlots {
		e := src[8+i*dynEntry:]
		if e[40] != 1 {
			continue
		}
		regs = append(regs, dynRegion{addr: ne.Uint64(e), len: ne.Uint64(e[8:]), key: ne.Uint32(e[16:]),
			local: fabric.LocalMem{PID: int32(ne.Uint32(e[20:])), FD: int32(ne.Uint32(e[24:])), Off: ne.Uint64(e[32:]), Len: ne.Uint64(e[8:])}})
	}
	w.dyn.tables[r] = regs
	w.dyn.seen[r] = w.dyn.syncs
	return nil
}

// reach sets up how this process reaches region g of target r: a
// mapping if it shares memory with r (kept for the window's life), and
// the NIC's view.
func (w *Window) reach(r int, g *dynRegion) error {
	t := &w.targets[r]
	if !t.local {
		g.rdata = fabric.RemoteMem{Addr: g.addr, Len: (g.len + 7) &^ 7, Key: g.key} // Attach exposed it padded
		return nil
	}
	if g.data == nil {
		if r == w.me {
			for _, m := range w.dyn.mine {
				if m.addr == g.addr && m.len == g.len {
					g.data = m.data
				}
			}
			if g.data == nil {
				return fmt.Errorf("%w: address %#x was detached", ErrRange, g.addr)
			}
		} else {
			if w.dyn.maps == nil {
				w.dyn.maps = map[fabric.LocalMem][]byte{}
			}
			b, ok := w.dyn.maps[g.local]
			if !ok {
				var err error
				if b, err = w.ep.MapLocal(g.local); err != nil {
					return err
				}
				w.owned = append(w.owned, b)
				w.dyn.maps[g.local] = b
			}
			g.data = b
		}
	}
	if w.nic && g.rdata.Len == 0 {
		rm, err := w.ep.Expose(g.data)
		if err != nil {
			return err
		}
		g.rdata = rm
	}
	return nil
}
