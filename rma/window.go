//go:build linux

package rma

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

// Flavor is how a window's memory came to be (MPI_WIN_CREATE_FLAVOR).
type Flavor uint8

const (
	FlavorCreate   Flavor = iota + 1 // Create: memory the caller brought
	FlavorAllocate                   // Allocate: memory the window allocated
	FlavorShared                     // AllocateShared: node-shared memory, SharedQuery
	FlavorDynamic                    // CreateDynamic: memory attached and detached later
)

func (f Flavor) String() string {
	switch f {
	case FlavorCreate:
		return "create"
	case FlavorAllocate:
		return "allocate"
	case FlavorShared:
		return "shared"
	case FlavorDynamic:
		return "dynamic"
	}
	return fmt.Sprintf("Flavor(%d)", uint8(f))
}

// Info holds the hints MPI defines for windows (MPI_Info keys) that
// change what Rivet does; the zero Info is MPI's defaults.
type Info struct {
	// NoLocks ("no_locks"): no process will lock this window, so
	// creation sets no lock words up and Lock, LockAll fail with ErrEpoch.
	NoLocks bool
	// AccumulateOps ("accumulate_ops"): SameOp or SameOpNoOp promise
	// that concurrent accumulates to one element use one op (and
	// no-op). Rivet's accumulates are atomic either way; the hint is
	// kept and reported.
	AccumulateOps AccumulateOps
	// AccumulateOrdering ("accumulate_ordering"): "" is MPI's default
	// "rar,raw,war,waw"; "none" lets accumulates reorder. Rivet's
	// accumulates complete in issue order either way.
	AccumulateOrdering string
	// SameSize and SameDispUnit ("same_size", "same_disp_unit"): every
	// process gives the same size or displacement unit; Create checks it.
	SameSize, SameDispUnit bool
	// NoRangeRecords turns range records off (ranges.go; also
	// RIVET_RMA_RANGES=off in the environment): writes then cost no
	// record at their target, and after a failure Undefined reports whole
	// windows instead of the ranges written. Rivet's own hint; every
	// process of the window must give the same.
	NoRangeRecords bool
}

// AccumulateOps is the accumulate_ops hint.
type AccumulateOps uint8

const (
	SameOpNoOp AccumulateOps = iota // "same_op_no_op", MPI's default
	SameOp                          // "same_op"
)

// Window is one process's handle on a window (MPI_Win). Its methods, and
// the operation functions, are safe for concurrent use; synchronization
// calls are collective or paired as MPI says.
type Window struct {
	mu      sync.Mutex
	ep      *fabric.Endpoint
	comm    *fabric.Comm // a duplicate of the creating communicator
	me, n   int
	flavor  Flavor
	info    Info
	nic     bool // atomicity domain: NIC atomics (else CPU atomics)
	base    []byte
	disp    int
	ctl     []byte // this process's control words (ctl.go)
	scratch []byte // registered words that NIC writes and atomics use
	targets []target
	owned   [][]byte // AllocMem and MapLocal memory to free with the window
	freed   bool

	st    epochs   // this process's synchronization state
	res   []uint64 // atomic results, one per word in flight
	res1  uint64   // the result of a single fetch-and-add
	guess []uint64 // what rmw expects each word to hold
	pend  []int    // the words rmw has yet to swap
	cas   casCache
	wbuf  [8]byte // the word rmw applies an operation to
	dyn   dynState
	obuf  []byte // an accumulate's origin operand

	gates    []atomic.Uint32 // per target, what needs no mutex (fast.go)
	inflight atomic.Int64    // operations past a gate

	track bool         // range records are on (ranges.go)
	recAt int          // where this process's record blocks lie in a target's control memory
	rev   *uint64      // this process's revoked word (failure.go)
	recs  []records    // per target, the ranges this process recorded there
	gets  []pendingGet // gets over the NIC not yet flushed
	und   Undefined    // what failed synchronizations left undefined
	// abandoned: the window was revoked here, and this process told
	// the others (abandon).
	abandoned bool

	polled time.Duration // when begin last polled the fabric, since clockBase
	calls  uint32        // begin's calls, for polling every 8th
}

// target is how this process reaches one member's window.
type target struct {
	world      int
	size       uint64
	disp       uint64
	local      bool   // its memory is mapped here: puts and gets are copies
	data, ctl  []byte // mapped (local targets), for copies and CPU atomics
	rdata, rcl fabric.RemoteMem
	nicRank    int // the world rank whose queue pair reaches rdata/rcl
	// pending says that puts or gets to it went to the NIC since its
	// last flush: a flush with nothing pending has nothing to wait for
	// (the accumulate family completes before it returns).
	pending bool
}

// Allocate creates a window of size bytes of memory the window allocates
// (MPI_Win_allocate), with displacement unit dispUnit; Base returns it.
// It is collective over c. A process failure during a creation may make
// it raise at some members and succeed at others, as every collective
// may; on a communicator whose error uniformity is fabric.UniformCreate
// it succeeds everywhere or raises everywhere (so do Create,
// AllocateShared and CreateDynamic).
func Allocate(ctx context.Context, c *fabric.Comm, size, dispUnit int, info Info) (*Window, error) {
	return create(ctx, c, FlavorAllocate, nil, size, dispUnit, info)
}

// Create makes a window over base (MPI_Win_create), which must be memory
// from fabric.Endpoint.AllocMem (or empty): Go heap memory cannot be
// exposed safely, as the runtime may move or free it while a NIC or a
// peer holds its address. It is collective over c.
func Create(ctx context.Context, c *fabric.Comm, base []byte, dispUnit int, info Info) (*Window, error) {
	return create(ctx, c, FlavorCreate, base, len(base), dispUnit, info)
}

// AllocateShared is Allocate for processes that all share memory (one
// node, reached over shared memory): each can load and store the others'
// memory directly, through SharedQuery (MPI_Win_allocate_shared).
func AllocateShared(ctx context.Context, c *fabric.Comm, size, dispUnit int, info Info) (*Window, error) {
	if c == nil {
		return nil, fabric.ErrComm
	}
	me := c.Group().Members()
	ep := c.Endpoint()
	for _, w := range me {
		if p := ep.Provider(w); p != "shm" && p != "self" {
			return nil, fmt.Errorf("%w: AllocateShared: world rank %d is reached over %s, not shared memory", fabric.ErrInvalid, w, p)
		}
	}
	return create(ctx, c, FlavorShared, nil, size, dispUnit, info)
}

const descSize = 128

// desc is what each process tells the others about its part of the window.
type desc struct {
	size, disp  uint64
	rdata, rctl fabric.RemoteMem
	ldata, lctl fabric.LocalMem
	dataExposed bool
}

func (d *desc) marshal(b []byte) {
	le := binary.LittleEndian
	clear(b)
	if d.dataExposed {
		b[1] = 1
	}
	le.PutUint64(b[8:], d.size)
	le.PutUint64(b[16:], d.disp)
	putRemote(b[24:], d.rdata)
	putRemote(b[44:], d.rctl)
	putLocal(b[64:], d.ldata)
	putLocal(b[88:], d.lctl)
}

func (d *desc) unmarshal(b []byte) {
	le := binary.LittleEndian
	d.dataExposed = b[1] == 1
	d.size, d.disp = le.Uint64(b[8:]), le.Uint64(b[16:])
	d.rdata, d.rctl = getRemote(b[24:]), getRemote(b[44:])
	d.ldata, d.lctl = getLocal(b[64:]), getLocal(b[88:])
}

func putRemote(b []byte, m fabric.RemoteMem) {
	le := binary.LittleEndian
	le.PutUint64(b, m.Addr)
	le.PutUint64(b[8:], m.Len)
	le.PutUint32(b[16:], m.Key)
}

func getRemote(b []byte) fabric.RemoteMem {
	le := binary.LittleEndian
	return fabric.RemoteMem{Addr: le.Uint64(b), Len: le.Uint64(b[8:]), Key: le.Uint32(b[16:])}
}

func putLocal(b []byte, m fabric.LocalMem) {
	le := binary.LittleEndian
	le.PutUint32(b, uint32(m.PID))
	le.PutUint32(b[4:], uint32(m.FD))
	le.PutUint64(b[8:], m.Off)
	le.PutUint64(b[16:], m.Len)
}

func getLocal(b []byte) fabric.LocalMem {
	le := binary.LittleEndian
	return fabric.LocalMem{PID: int32(le.Uint32(b)), FD: int32(le.Uint32(b[4:])), Off: le.Uint64(b[8:]), Len: le.Uint64(b[16:])}
}

func create(ctx context.Context, c *fabric.Comm, flavor Flavor, base []byte, size, dispUnit int, info Info) (*Window, error) {
	if c == nil {
		return nil, fabric.ErrComm
	}
	if size < 0 || dispUnit <= 0 {
		return nil, fmt.Errorf("%w: window of %d bytes with displacement unit %d", fabric.ErrInvalid, size, dispUnit)
	}
	if info.AccumulateOrdering != "" && info.AccumulateOrdering != "none" && info.AccumulateOrdering != "rar,raw,war,waw" {
		return nil, fmt.Errorf("%w: accumulate_ordering %q (Rivet knows \"none\" and the default \"rar,raw,war,waw\")", fabric.ErrInvalid, info.AccumulateOrdering)
	}
	w, err := build(ctx, c, flavor, base, size, dispUnit, info)
	if c.ErrorUniform() != fabric.UniformCreate {
		// A failure during the exchanges may raise here and not at a
		// member that had what it needed and returned (MPI's default).
		return w, err
	}
	// mpi_error_uniform=create: a window is a communication context, so
	// its creation succeeds at every member or raises at every member,
	// and a member whose part succeeded releases it when another's
	// failed — no process ever targets a window a live member lacks.
	if err = c.Uniform(ctx, err); err != nil && w != nil {
		w.release()
		w = nil
	}
	return w, err
}

// testHookBuilt, when a test sets it, decides this process's outcome of
// a window creation after every exchange, as if a failure it learned of
// at the last moment had made its part fail.
var testHookBuilt func(*Window) error

// build is create's collective part.
func build(ctx context.Context, c *fabric.Comm, flavor Flavor, base []byte, size, dispUnit int, info Info) (_ *Window, err error) {
	ep := c.Endpoint()
	// Refuse what cannot be exposed before anything collective happens,
	// so that no process waits for one that gave up.
	var baseErr error
	if flavor == FlavorCreate && len(base) > 0 {
		if _, err := ep.ExposeLocal(base); err != nil {
			baseErr = fmt.Errorf("%w (it is %d bytes of Go memory, which the runtime may move or free; use Allocate, or fabric.Endpoint.AllocMem)", ErrMemory, len(base))
		}
	}
	comm, err := c.Dup(ctx)
	if err != nil {
		return nil, err
	}
	w := &Window{ep: ep, comm: comm, me: comm.Rank(), n: comm.Size(), flavor: flavor, info: info, disp: dispUnit,
		gates: make([]atomic.Uint32, comm.Size()), track: tracking(info), recs: make([]records, comm.Size())}
	defer func() {
		if err != nil {
			w.release()
		}
	}()
	members := comm.Group().Members()
	var mine desc
	mine.size, mine.disp = uint64(size), uint64(dispUnit)
	viaVerbs := false
	for _, r := range members {
		if ep.Provider(r) == "verbs" {
			viaVerbs = true
		}
	}
	// One exchange tells everyone whether anyone reaches a member over
	// verbs (the atomicity domain) and whether anyone failed its own
	// checks, in which case all give up together: no process is left
	// waiting for one that returned.
	flags := []int32{0}
	if viaVerbs {
		flags[0] |= 1
	}
	if baseErr != nil {
		flags[0] |= 2
	}
	if !w.track {
		flags[0] |= 4
	}
	all := make([]int32, w.n)
	if err := collectives.Allgather(ctx, comm, flags, all); err != nil {
		return nil, err
	}
	if baseErr != nil {
		return nil, baseErr
	}
	for r, f := range all {
		if f&2 != 0 {
			return nil, fmt.Errorf("%w: rank %d could not expose its window memory", fabric.ErrInvalid, r)
		}
		w.nic = w.nic || f&1 != 0
		w.track = w.track && f&4 == 0 // records are useful only if every origin writes them
	}
	if w.nic && flavor == FlavorShared {
		return nil, fmt.Errorf("%w: AllocateShared over processes that do not all share memory", fabric.ErrInvalid)
	}
	// This process's memory — its window (Allocate), the control words,
	// the registered scratch words — and how peers reach it. A failure
	// here is reported in the descriptor, so the exchange still happens.
	setupErr := w.setup(flavor, base, size, &mine)
	var b [descSize]byte
	mine.marshal(b[:])
	if setupErr != nil {
		b[2] = 1
	}
	descs := make([]byte, descSize*w.n)
	if err := collectives.Allgather(ctx, comm, b[:], descs); err != nil {
		return nil, err
	}
	if setupErr != nil {
		return nil, setupErr
	}
	for r := range w.n {
		if descs[r*descSize+2] != 0 {
			return nil, fmt.Errorf("rma: rank %d could not set its window memory up", r)
		}
	}
	w.targets = make([]target, w.n)
	for r := range w.n {
		var d desc
		d.unmarshal(descs[r*descSize:])
		if info.SameSize && d.size != uint64(size) || info.SameDispUnit && d.disp != uint64(dispUnit) {
			err = fmt.Errorf("%w: same_size/same_disp_unit promised, but rank %d gave %d bytes with unit %d", fabric.ErrInvalid, r, d.size, d.disp)
			break
		}
		if e := w.connectTarget(r, members[r], &d); e != nil && err == nil {
			err = e
		}
	}
	// Every process reports how its mapping went before anyone frees
	// memory a peer is still mapping.
	ok := []int32{0}
	if err != nil {
		ok[0] = 1
	}
	if e := collectives.Allgather(ctx, comm, ok, all); e != nil && err == nil {
		err = e
	}
	if err != nil {
		return nil, err
	}
	for r, b := range all {
		if b != 0 {
			return nil, fmt.Errorf("rma: rank %d could not reach the window", r)
		}
	}
	if w.nic {
		// Connect every queue pair now, while every process is here:
		// afterwards no target needs to take part in anything.
		for i := range w.targets {
			t := &w.targets[i]
			if t.nicRank >= 0 {
				if _, err := w.casWord(ctx, t, regionCtl, 0, 0, 0); err != nil {
					return nil, err
				}
			}
		}
		if err := collectives.Barrier(ctx, comm); err != nil {
			return nil, err
		}
	}
	if testHookBuilt != nil {
		if err := testHookBuilt(w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// setup allocates and exposes this process's memory for a window and
// fills in its descriptor.
func (w *Window) setup(flavor Flavor, base []byte, size int, mine *desc) (err error) {
	ep := w.ep
	switch {
	case flavor != FlavorCreate && size > 0:
		if w.base, err = w.alloc(size); err != nil {
			return err
		}
	case flavor == FlavorCreate:
		w.base = base
	}
	ctlLen := ctlSize(w.n)
	if flavor == FlavorDynamic {
		ctlLen += dynTableSize
	}
	if w.ctl, err = w.alloc(ctlLen); err != nil {
		return err
	}
	if w.scratch, err = w.alloc(scratchSize(w.n)); err != nil {
		return err
	}
	w.recAt, w.rev = recOff(w.n, w.me), word(w.ctl, uint64(8*revWord(w.n)))
	if len(w.base) > 0 {
		mine.dataExposed = true
		if mine.ldata, err = ep.ExposeLocal(padded(w.base)); err != nil {
			// A sub-slice whose padding crosses its allocation's end:
			// exposed as it is (an accumulate on its last word then
			// fails with a bounds error, before the NIC).
			mine.ldata, err = ep.ExposeLocal(w.base)
		}
		if err != nil {
			return err
		}
	}
	if mine.lctl, err = ep.ExposeLocal(w.ctl); err != nil {
		return err
	}
	if w.nic {
		if len(w.base) > 0 {
			if mine.rdata, err = ep.Expose(padded(w.base)); err != nil {
				mine.rdata, err = ep.Expose(w.base)
			}
			if err != nil {
				return err
			}
		}
		if mine.rctl, err = ep.Expose(w.ctl); err != nil {
			return err
		}
	}
	return nil
}

// padded is b extended to a multiple of 8 bytes, as far as its capacity
// allows (memory from AllocMem always allows it): what the window exposes,
// so that the 8-byte words holding its last bytes are within reach of the
// atomics that accumulates run on them.
func padded(b []byte) []byte {
	if n := (len(b) + 7) &^ 7; cap(b) >= n {
		return b[:n]
	}
	return b
}

// alloc takes n bytes from AllocMem, to free with the window.
func (w *Window) alloc(n int) ([]byte, error) {
	b, err := w.ep.AllocMem(n)
	if err != nil {
		return nil, err
	}
	w.owned = append(w.owned, b)
	return b, nil
}

// connectTarget sets up the way to member r (world rank wr) from its
// descriptor: mappings for processes sharing memory, remote keys for
// the others.
func (w *Window) connectTarget(r, wr int, d *desc) error {
	t := &w.targets[r]
	*t = target{world: wr, size: d.size, disp: d.disp, nicRank: -1}
	if d.size > 0 && !d.dataExposed {
		return fmt.Errorf("%w: rank %d has %d bytes but exposed none", fabric.ErrInvalid, r, d.size)
	}
	if p := w.ep.Provider(wr); p == "shm" || p == "self" {
		t.local = true
		if r == w.me {
			t.data, t.ctl = w.base, w.ctl
		} else {
			var err error
			if d.size > 0 {
				if t.data, err = w.ep.MapLocal(d.ldata); err != nil {
					return err
				}
				w.owned = append(w.owned, t.data)
			}
			if t.ctl, err = w.ep.MapLocal(d.lctl); err != nil {
				return err
			}
			w.owned = append(w.owned, t.ctl)
		}
		if w.nic {
			// Atomics go through this process's own NIC, on its own
			// registration of the shared pages.
			var err error
			if len(t.data) > 0 {
				if t.rdata, err = w.ep.Expose(t.data); err != nil {
					return err
				}
			}
			if t.rcl, err = w.ep.Expose(t.ctl); err != nil {
				return err
			}
			t.nicRank = w.ep.World().Rank()
		}
		return nil
	}
	t.rdata, t.rcl, t.nicRank = d.rdata, d.rctl, wr
	return nil
}

// Base is this process's window memory (nil for an empty one).
func (w *Window) Base() []byte { return w.base }

// Size is the length of this process's window memory in bytes.
func (w *Window) Size() int { return len(w.base) }

// DispUnit is this process's displacement unit.
func (w *Window) DispUnit() int { return w.disp }

// Flavor says how the window was made.
func (w *Window) Flavor() Flavor { return w.flavor }

// Info returns the hints the window was made with.
func (w *Window) Info() Info { return w.info }

// Group is the window's group (MPI_Win_get_group).
func (w *Window) Group() fabric.Group { return w.comm.Group() }

// Unified reports the memory model, which is always MPI_WIN_UNIFIED:
// there is one copy of window memory, which loads and stores see.
func (w *Window) Unified() bool { return true }

// NICAtomics reports the window's atomicity domain: true when
// accumulates and locks run on NIC atomics (some member is reached over
// verbs), false when they are CPU atomics on shared memory.
func (w *Window) NICAtomics() bool { return w.nic }

// SharedQuery returns rank r's window memory as this process maps it,
// with its displacement unit (MPI_Win_shared_query), for windows whose
// processes share memory; loads and stores on it reach r's memory.
func (w *Window) SharedQuery(r int) ([]byte, int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.freed {
		return nil, 0, ErrFreed
	}
	if r < 0 || r >= w.n {
		return nil, 0, fmt.Errorf("%w: rank %d of a %d-process window", fabric.ErrRank, r, w.n)
	}
	t := &w.targets[r]
	if !t.local {
		return nil, 0, fmt.Errorf("%w: rank %d does not share memory with this process", fabric.ErrInvalid, r)
	}
	return t.data, int(t.disp), nil
}

// Free frees the window (MPI_Win_free), collectively: it waits until
// every process is done with the window, then releases this process's
// memory and mappings. Every epoch must be closed first (Revoke closes
// them all, to abandon an epoch a failure left open).
//
// After a failure, or once the window is revoked, Free raises an error
// matching fabric.ErrProcFailed or fabric.ErrRevoked (at some members,
// perhaps not all). It waits for the live members only — each tells the
// others it is freeing, in their control memory — so that no survivor
// still reaches memory this one released; then it releases everything
// this process holds for the window, and the window is unusable, as
// after a Free that succeeded. It never waits for a failed process.
// The error is deliberate — the final synchronization did not include
// every member, and Undefined says what that left undefined — so a
// deferred Free filters the classes it expects:
//
//	defer func() {
//		if err := w.Free(ctx); err != nil && !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
//			log.Print(err)
//		}
//	}()
func (w *Window) Free(ctx context.Context) error {
	w.mu.Lock()
	if w.freed {
		w.mu.Unlock()
		return ErrFreed
	}
	revoked := w.revokedHere()
	if revoked {
		w.abandon()
	} else if err := w.st.idle(); err != nil {
		w.mu.Unlock()
		return fmt.Errorf("%w: Free with %v", ErrEpoch, err)
	}
	w.mu.Unlock()
	// Tell every live member this process is freeing: a member that met
	// a failure waits for these words rather than a barrier. The flush
	// completes them (and every operation) before anyone can release.
	for r := range w.n {
		if r != w.me && w.failed(r) == nil {
			w.storeCtl(ctx, r, freeWord(w.n, w.me), 1)
		}
	}
	err := w.flushAll(ctx)
	if revoked {
		err = nil // the revoke's operations ended undefined; flush errors say nothing new
	}
	switch {
	case err != nil:
	case revoked:
		err = w.errRevoked()
	default:
		if err = w.anyFailed(); err == nil {
			err = collectives.Barrier(ctx, w.comm)
		}
	}
	if err != nil && ctx.Err() == nil {
		w.awaitFreeing(ctx)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.freed = true
	w.drain()
	if e := w.release(); err == nil {
		err = e
	}
	return err
}

// awaitFreeing waits until every member not known failed (or gone: it
// closed its endpoint) has said it is freeing the window, honouring ctx.
func (w *Window) awaitFreeing(ctx context.Context) {
	for r := range w.n {
		wr := w.targets[r].world
		for spins := 0; r != w.me && w.ctlAt(freeWord(w.n, r)) == 0 && w.failed(r) == nil && w.ep.State(wr) != fabric.Stopped; spins++ {
			if ctx.Err() != nil {
				return
			}
			if spins%64 == 63 {
				w.ep.Poll()
			}
			sleepCtx(ctx, 20)
		}
	}
}

// release frees the memory the window holds, mappings of peers' memory
// first, and the communicator.
func (w *Window) release() error {
	var first error
	for i := len(w.owned) - 1; i >= 0; i-- {
		if err := w.ep.FreeMem(w.owned[i]); err != nil && first == nil {
			first = err
		}
	}
	w.owned = nil
	if w.comm != nil {
		if err := w.comm.Free(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
