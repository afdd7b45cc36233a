//go:build linux

package osu

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/rma"
)

// WinFlavor is how a one-sided benchmark creates its windows (-w).
type WinFlavor int

// The window flavours, in OSU's order.
const (
	WinCreate   WinFlavor = iota // -w create: MPI_Win_create over AllocMem memory
	WinAllocate                  // -w allocate: MPI_Win_allocate
	WinDynamic                   // -w dynamic: MPI_Win_create_dynamic + attach
)

var winNames = []string{"MPI_Win_create", "MPI_Win_allocate", "MPI_Win_create_dynamic"}

// Sync is a one-sided benchmark's synchronization (-s).
type Sync int

// The synchronizations, in OSU's order.
const (
	SyncLock       Sync = iota // lock: one lock/unlock epoch per operation
	SyncPSCW                   // pscw: post/start/complete/wait
	SyncFence                  // fence
	SyncFlush                  // flush: one lock epoch, a flush per operation
	SyncFlushLocal             // flush_local
	SyncLockAll                // lock_all: one lock_all/unlock_all per operation
)

var syncNames = []string{"MPI_Win_lock/unlock", "MPI_Win_post/start/complete/wait", "MPI_Win_fence",
	"MPI_Win_flush", "MPI_Win_flush_local", "MPI_Win_lock_all/unlock_all"}

// Datatype is an element type of osu_acc_latency, osu_fop_latency and
// osu_cas_latency (-T).
type Datatype struct {
	Name string // as MPI_Type_get_name prints it
	Size int    // bytes
}

// The datatypes -T takes: OSU's three and, as Rivet's extension, MPI_LONG,
// the 8-byte integer that NIC atomics serve natively.
var (
	TypeChar  = Datatype{"MPI_CHAR", 1}
	TypeInt   = Datatype{"MPI_INT", 4}
	TypeFloat = Datatype{"MPI_FLOAT", 4}
	TypeLong  = Datatype{"MPI_LONG", 8}
)

// RMAOptions are OSU's options for the one-sided benchmarks.
type RMAOptions struct {
	Options
	Win   WinFlavor
	Sync  Sync
	Types []Datatype // -T, in order; MPI_CHAR when not given
	// Decimals (--decimals, Rivet's own option) is how many decimals
	// each figure has; OSU prints 2, too few for the 0.03 µs of an
	// operation on shared memory.
	Decimals int
}

// rmaCall is the operation a one-sided benchmark times.
type rmaCall int

const (
	callPut rmaCall = iota
	callGet
	callAcc
	callGetAcc
	callFop
	callCas
)

// OneSided is one of OSU's one-sided benchmarks.
type OneSided struct {
	Name  string
	Title string
	kind  int // kindLatency, kindBW or kindBiBW
	call  rmaCall
	// exclusive: the lock and flush modes take an exclusive lock where the
	// other benchmarks take a shared one (lockExcl: the lock mode only).
	exclusive, lockExcl bool
	win                 WinFlavor
	sync                Sync
}

// OneSidedBenchmarks are OSU 7.4's one-sided benchmarks that Rivet runs.
var OneSidedBenchmarks = []OneSided{
	{Name: "osu_put_latency", Title: "OSU MPI_Put Latency Test", kind: kindLatency, call: callPut, win: WinAllocate, sync: SyncFlush},
	{Name: "osu_get_latency", Title: "OSU MPI_Get latency Test", kind: kindLatency, call: callGet, win: WinAllocate, sync: SyncFlush},
	{Name: "osu_put_bw", Title: "OSU MPI_Put Bandwidth Test", kind: kindBW, call: callPut, win: WinAllocate, sync: SyncFlush},
	{Name: "osu_get_bw", Title: "OSU MPI_Get Bandwidth Test", kind: kindBW, call: callGet, win: WinAllocate, sync: SyncFlush},
	{Name: "osu_put_bibw", Title: "OSU MPI_Put Bi-directional Bandwidth Test", kind: kindBiBW, call: callPut, win: WinAllocate, sync: SyncPSCW},
	{Name: "osu_acc_latency", Title: "OSU MPI_Accumulate latency Test", kind: kindLatency, call: callAcc, win: WinAllocate, sync: SyncFlush},
	// OSU's osu_get_acc_latency sets neither default, so they are the
	// first of each list: create and lock.
	{Name: "osu_get_acc_latency", Title: "OSU MPI_Get_accumulate latency Test", kind: kindLatency, call: callGetAcc, win: WinCreate, sync: SyncLock, exclusive: true},
	{Name: "osu_fop_latency", Title: "OSU MPI_Fetch_and_op latency Test", kind: kindLatency, call: callFop, win: WinAllocate, sync: SyncFlush, lockExcl: true},
	{Name: "osu_cas_latency", Title: "OSU MPI_Compare_and_swap latency Test", kind: kindLatency, call: callCas, win: WinAllocate, sync: SyncFlush, lockExcl: true},
}

// LookupOneSided finds a one-sided benchmark by OSU name.
func LookupOneSided(name string) (OneSided, bool) {
	for _, b := range OneSidedBenchmarks {
		if b.Name == name {
			return b, true
		}
	}
	return OneSided{}, false
}

func (b OneSided) typed() bool { return b.call == callAcc || b.call == callFop || b.call == callCas }

// ParseArgs reads OSU's one-sided options: -m [MIN:]MAX, -i, -x, -w, -s,
// -W for the bandwidth tests and -T for the accumulate, fetch-and-op and
// compare-and-swap tests. osu_put_bibw takes only -s pscw and fence, as
// in OSU.
func (b OneSided) ParseArgs(args []string, stderr io.Writer) (RMAOptions, error) {
	o := RMAOptions{Win: b.win, Sync: b.sync, Options: Options{MinSize: 1, MaxSize: 1 << 22,
		Iterations: 10000, Warmup: 100, IterLarge: 1000, WarmupLarge: 10}}
	if b.kind != kindLatency {
		o.Options = Options{MinSize: 1, MaxSize: 1 << 22, Iterations: 100, Warmup: 10, IterLarge: 20, WarmupLarge: 2, Window: 64}
	}
	fs, common := newFlags(b.Name, stderr, true)
	win := fs.String("w", "", "window creation: `create|allocate|dynamic`")
	sync := fs.String("s", "", "synchronization: `pscw|fence|lock|flush|flush_local|lock_all`")
	decimals := fs.Int("decimals", 2, "`digits` after the decimal point (OSU prints 2; not in OSU)")
	var window *int
	if b.kind != kindLatency {
		window = fs.Int("W", 0, "`operations` issued per synchronization (window size)")
	}
	if b.typed() {
		fs.Func("T", "element `type`: mpi_char, mpi_int, mpi_float, all (OSU's), or mpi_long (8 bytes; Rivet's)", func(s string) error {
			t, err := parseTypes(s)
			o.Types = append(o.Types, t...)
			return err
		})
	}
	if err := common(args, &o.Options); err != nil {
		return o, err
	}
	if o.MinSize < 1 {
		return o, fmt.Errorf("%w: -m: the smallest size of a one-sided test is 1 byte", ErrUsage)
	}
	if *decimals < 0 || *decimals > 9 {
		return o, fmt.Errorf("%w: --decimals %d: want 0 to 9", ErrUsage, *decimals)
	}
	o.Decimals = *decimals
	if *win != "" {
		i := indexFold([]string{"create", "allocate", "dynamic"}, *win)
		if i < 0 {
			return o, fmt.Errorf("%w: -w %q: want create, allocate or dynamic", ErrUsage, *win)
		}
		o.Win = WinFlavor(i)
	}
	if *sync != "" {
		i := indexFold([]string{"lock", "pscw", "fence", "flush", "flush_local", "lock_all"}, *sync)
		if i < 0 || (b.kind == kindBiBW && Sync(i) != SyncPSCW && Sync(i) != SyncFence) {
			want := "pscw, fence, lock, flush, flush_local or lock_all"
			if b.kind == kindBiBW {
				want = "pscw or fence"
			}
			return o, fmt.Errorf("%w: -s %q: %s takes %s", ErrUsage, *sync, b.Name, want)
		}
		o.Sync = Sync(i)
	}
	if window != nil && *window != 0 {
		if *window < 1 {
			return o, fmt.Errorf("%w: -W %d: the window must be at least 1", ErrUsage, *window)
		}
		o.Window = *window
	}
	if len(o.Types) == 0 {
		o.Types = []Datatype{TypeChar}
	}
	return o, nil
}

// parseTypes reads one -T argument as OSU does, by case-blind prefix.
func parseTypes(s string) ([]Datatype, error) {
	has := func(p string) bool { return len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) }
	switch {
	case has("MPI_CHAR"):
		return []Datatype{TypeChar}, nil
	case has("MPI_INT"):
		return []Datatype{TypeInt}, nil
	case has("MPI_FLOAT"):
		return []Datatype{TypeFloat}, nil
	case has("MPI_LONG"):
		return []Datatype{TypeLong}, nil
	case has("ALL"):
		return []Datatype{TypeChar, TypeInt, TypeFloat}, nil
	}
	return nil, fmt.Errorf("want mpi_char, mpi_int, mpi_float, mpi_long or all")
}

func indexFold(list []string, s string) int {
	for i, v := range list {
		if strings.EqualFold(v, s) {
			return i
		}
	}
	return -1
}

// Header writes OSU's preamble for b with element type t.
func (b OneSided) Header(w io.Writer, o RMAOptions, t Datatype) {
	fmt.Fprintf(w, "# %s v%s\n# Window creation: %s\n# Synchronization: %s\n", b.Title, Version, winNames[o.Win], syncNames[o.Sync])
	if b.call != callGetAcc { // OSU's osu_get_acc_latency prints no datatype
		fmt.Fprintf(w, "# Datatype: %s.\n", t.Name)
	}
	col := "Latency (us)"
	if b.kind != kindLatency {
		col = "Bandwidth (MB/s)"
	}
	fmt.Fprintf(w, "%-*s%*s\n", 10, "# Size", rmaFieldWidth, col)
}

// rmaFieldWidth is the width of OSU 7.4's one-sided value columns.
const rmaFieldWidth = 20

// Run runs b between the two ranks of c, printing on rank 0 to w.
func (b OneSided) Run(ctx context.Context, c *fabric.Comm, o RMAOptions, w io.Writer) error {
	if c.Size() != 2 {
		return fmt.Errorf("%s: this test requires exactly two processes (have %d)", b.Name, c.Size())
	}
	if o.MinSize < 1 {
		return fmt.Errorf("%w: %s: the smallest size is 1 byte", ErrUsage, b.Name)
	}
	r := &rmaRun{b: b, o: o, c: c, ep: c.Endpoint(), peer: 1 - c.Rank()}
	defer r.free()
	if err := r.buffers(); err != nil {
		return err
	}
	types := o.Types
	if !b.typed() {
		types = []Datatype{TypeChar}
	}
	for _, t := range types {
		if c.Rank() == 0 {
			b.Header(w, o, t)
		}
		if err := r.runType(ctx, t, w); err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
	}
	return nil
}

// rmaRun is one run of a one-sided benchmark: its buffers, from AllocMem
// as OSU's come from page-aligned allocations.
type rmaRun struct {
	b    OneSided
	o    RMAOptions
	c    *fabric.Comm
	ep   *fabric.Endpoint
	peer int

	sbuf, rbuf, tbuf, cbuf []byte // origin, result (get), fetch result, compare
	base                   []byte // window memory for create and dynamic windows
}

// buffers allocates the largest buffers once; the windows over them are
// made per size, as OSU's are.
func (r *rmaRun) buffers() error {
	n := max(r.o.MaxSize, 8)
	if r.b.kind != kindLatency {
		n = max(r.o.MaxSize*r.o.Window, 1)
	}
	var err error
	alloc := func(fill byte) []byte {
		if err != nil {
			return nil
		}
		var b []byte
		if b, err = r.ep.AllocMem(n); err == nil {
			for i := range b {
				b[i] = fill
			}
		}
		return b
	}
	switch r.b.call {
	case callFop, callCas: // OSU's allocate_atomic_memory
		r.sbuf, r.base, r.tbuf, r.cbuf = alloc('a'), alloc('b'), alloc('c'), alloc('a')
	case callGetAcc:
		r.sbuf, r.base, r.tbuf = alloc(0), alloc(0), alloc(0)
	default:
		r.sbuf, r.base, r.rbuf = alloc('a'), alloc('a'), alloc('a')
	}
	return err
}

func (r *rmaRun) free() {
	for _, b := range [][]byte{r.sbuf, r.rbuf, r.tbuf, r.cbuf, r.base} {
		if b != nil {
			r.ep.FreeMem(b)
		}
	}
}

// window makes the window of size bytes, by the flavour -w chose, and
// returns it with the displacement of its memory at the peer.
func (r *rmaRun) window(ctx context.Context, size int) (*rma.Window, int, error) {
	switch r.o.Win {
	case WinCreate:
		w, err := rma.Create(ctx, r.c, r.base[:size], 1, rma.Info{})
		return w, 0, err
	case WinDynamic:
		w, err := rma.CreateDynamic(ctx, r.c, rma.Info{})
		if err != nil {
			return nil, 0, err
		}
		if err := w.Attach(r.base[:size]); err != nil {
			w.Free(ctx)
			return nil, 0, err
		}
		var mine, theirs [8]byte
		putInt(mine[:], rma.Address(r.base[:size]))
		if _, err := r.c.Sendrecv(ctx, mine[:], r.peer, 1, theirs[:], r.peer, 1); err != nil {
			w.Free(ctx)
			return nil, 0, err
		}
		return w, getInt(theirs[:]), nil
	default:
		w, err := rma.Allocate(ctx, r.c, size, 1, rma.Info{})
		return w, 0, err
	}
}

func (r *rmaRun) closeWindow(ctx context.Context, w *rma.Window, size int) error {
	if r.o.Win == WinDynamic {
		if err := w.Detach(r.base[:size]); err != nil {
			return err
		}
	}
	return w.Free(ctx)
}

func putInt(b []byte, v int) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func getInt(b []byte) int {
	v := 0
	for i := range 8 {
		v |= int(b[i]) << (8 * i)
	}
	return v
}

// runType measures every size (or, for fetch-and-op and compare-and-swap,
// the one element) with element type t, printing rows on rank 0.
func (r *rmaRun) runType(ctx context.Context, t Datatype, out io.Writer) error {
	ops, err := typedOpsFor(t, r.b.call == callCas)
	if err != nil {
		return err
	}
	if r.b.call == callFop || r.b.call == callCas {
		// One window of the largest size, as OSU's atomic tests make.
		w, disp, err := r.window(ctx, r.o.MaxSize)
		if err != nil {
			return err
		}
		do := func(peer int) error {
			if r.b.call == callFop {
				return ops.fop(ctx, w, r.sbuf, r.tbuf, peer, disp)
			}
			return ops.cas(ctx, w, r.sbuf, r.cbuf, r.tbuf, peer, disp)
		}
		if err := collectives.Barrier(ctx, r.c); err != nil {
			return err
		}
		v, err := r.timed(ctx, w, r.o.Iterations, r.o.Warmup, do)
		if err == nil {
			err = collectives.Barrier(ctx, r.c)
		}
		if err != nil {
			r.closeWindow(ctx, w, r.o.MaxSize)
			return err
		}
		if r.c.Rank() == 0 {
			fmt.Fprintf(out, "%-*d%*.*f\n", 10, t.Size, rmaFieldWidth, r.o.Decimals, r.latency(v, r.o.Iterations))
		}
		return r.closeWindow(ctx, w, r.o.MaxSize)
	}
	prog := rank0Progress(r.c, r.b.Name)
	defer prog.Done()
	steps := 0
	for size := r.o.MinSize; size <= r.o.MaxSize; size *= 2 {
		steps++
	}
	step := 0
	for size := r.o.MinSize; size <= r.o.MaxSize; size *= 2 {
		step++
		prog.Step(step, steps, fmt.Sprintf("%d bytes, %s", size, t.Name))
		count := size / t.Size
		if count == 0 {
			continue
		}
		iters, warm := r.o.counts(size)
		n := size
		if r.b.kind != kindLatency {
			n = size * r.o.Window
		}
		w, disp, err := r.window(ctx, n)
		if err != nil {
			return fmt.Errorf("at %d bytes: %w", size, err)
		}
		do := r.sizeOp(ctx, w, ops, size, count, disp)
		if r.b.kind != kindLatency || r.o.Sync == SyncFence || r.o.Sync == SyncPSCW {
			err = collectives.Barrier(ctx, r.c)
		}
		var d time.Duration
		if err == nil {
			d, err = r.timed(ctx, w, iters, warm, do)
		}
		if err == nil {
			err = collectives.Barrier(ctx, r.c)
		}
		if err != nil {
			r.closeWindow(ctx, w, n)
			return fmt.Errorf("at %d bytes: %w", size, err)
		}
		if r.c.Rank() == 0 {
			var v float64
			switch r.b.kind {
			case kindLatency:
				v = r.latency(d, iters)
			case kindBW:
				v = float64(size) / 1e6 * float64(iters*r.o.Window) / d.Seconds()
			case kindBiBW:
				v = float64(size) / 1e6 * float64(iters*r.o.Window) / d.Seconds() * 2
			}
			fmt.Fprintf(out, "%-*d%*.*f\n", 10, size, rmaFieldWidth, r.o.Decimals, v)
		}
		if err := r.closeWindow(ctx, w, n); err != nil {
			return err
		}
	}
	return nil
}

// latency is the time per operation in µs: the active modes time a round
// of two operations, one each way.
func (r *rmaRun) latency(d time.Duration, iters int) float64 {
	us := d.Seconds() * 1e6 / float64(iters)
	if r.o.Sync == SyncFence || r.o.Sync == SyncPSCW {
		us /= 2
	}
	return us
}

// sizeOp returns the operation the size loop times: for the bandwidth
// tests, a window of operations at consecutive offsets.
func (r *rmaRun) sizeOp(ctx context.Context, w *rma.Window, ops typedOps, size, count, disp int) func(peer int) error {
	switch r.b.call {
	case callPut:
		return func(peer int) error {
			for j := range r.repeat() {
				if err := rma.Put(ctx, w, r.sbuf[j*size:(j+1)*size], peer, disp+j*size); err != nil {
					return err
				}
			}
			return nil
		}
	case callGet:
		return func(peer int) error {
			for j := range r.repeat() {
				if err := rma.Get(ctx, w, r.rbuf[j*size:(j+1)*size], peer, disp+j*size); err != nil {
					return err
				}
			}
			return nil
		}
	case callAcc:
		return func(peer int) error { return ops.acc(ctx, w, r.sbuf, count, peer, disp) }
	default: // callGetAcc: MPI_CHAR, MPI_SUM
		return func(peer int) error {
			return rma.GetAccumulate(ctx, w, r.sbuf[:size], r.tbuf[:size], peer, disp, sumBytes)
		}
	}
}

func (r *rmaRun) repeat() int {
	if r.b.kind == kindLatency {
		return 1
	}
	return r.o.Window
}

// timed runs iters+warm rounds of do under -s's synchronization, as
// OSU's loops do, and returns rank 0's time for the iters.
func (r *rmaRun) timed(ctx context.Context, w *rma.Window, iters, warm int, do func(peer int) error) (time.Duration, error) {
	var start time.Time
	mark := func(i int) {
		if i == warm {
			start = time.Now()
		}
	}
	me, peer := r.c.Rank(), r.peer
	lt := rma.Shared
	if r.b.exclusive || (r.b.lockExcl && r.o.Sync == SyncLock) {
		lt = rma.Exclusive
	}
	group, err := w.Group().Incl([]int{peer})
	if err != nil {
		return 0, err
	}
	bw := r.b.kind == kindBW
	switch r.o.Sync {
	case SyncFlush, SyncFlushLocal:
		if me != 0 {
			return 0, nil
		}
		if err := w.Lock(ctx, lt, peer, 0); err != nil {
			return 0, err
		}
		for i := range iters + warm {
			mark(i)
			if err := do(peer); err != nil {
				return 0, err
			}
			var err error
			if r.o.Sync == SyncFlush {
				err = w.Flush(ctx, peer)
			} else {
				err = w.FlushLocal(ctx, peer)
			}
			if err != nil {
				return 0, err
			}
		}
		d := time.Since(start)
		return d, w.Unlock(ctx, peer)
	case SyncLock, SyncLockAll:
		if me != 0 {
			return 0, nil
		}
		for i := range iters + warm {
			mark(i)
			var err error
			if r.o.Sync == SyncLock {
				err = w.Lock(ctx, lt, peer, 0)
			} else {
				err = w.LockAll(ctx, 0)
			}
			if err != nil {
				return 0, err
			}
			if err := do(peer); err != nil {
				return 0, err
			}
			if r.o.Sync == SyncLock {
				err = w.Unlock(ctx, peer)
			} else {
				err = w.UnlockAll(ctx)
			}
			if err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	case SyncFence:
		for i := range iters + warm {
			mark(i)
			var err error
			switch {
			case r.b.kind == kindBiBW, me == 0 && bw:
				err = r.steps(ctx, w, do, group, stFence, stOp, stFence)
			case bw:
				err = r.steps(ctx, w, do, group, stFence, stFence)
			case me == 0:
				err = r.steps(ctx, w, do, group, stFence, stOp, stFence, stFence)
			default:
				err = r.steps(ctx, w, do, group, stFence, stFence, stOp, stFence)
			}
			if err != nil {
				return 0, err
			}
		}
	default: // SyncPSCW
		for i := range iters + warm {
			var err error
			switch {
			case r.b.kind == kindBiBW:
				mark(i)
				err = r.steps(ctx, w, do, group, stPost, stStart, stOp, stComplete, stWait)
			case me == 0:
				if err = w.Start(ctx, group, 0); err != nil {
					return 0, err
				}
				mark(i)
				if bw {
					err = r.steps(ctx, w, do, group, stOp, stComplete)
				} else {
					err = r.steps(ctx, w, do, group, stOp, stComplete, stPost, stWait)
				}
			case bw:
				err = r.steps(ctx, w, do, group, stPost, stWait)
			default:
				err = r.steps(ctx, w, do, group, stPost, stWait, stStart, stOp, stComplete)
			}
			if err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start), nil
}

// A step is one call of an active-target round.
type step uint8

const (
	stFence step = iota
	stPost
	stStart
	stComplete
	stWait
	stOp // the timed operation(s)
)

// steps runs one active-target round, stopping at the first error.
func (r *rmaRun) steps(ctx context.Context, w *rma.Window, do func(int) error, group fabric.Group, steps ...step) error {
	for _, s := range steps {
		var err error
		switch s {
		case stFence:
			err = w.Fence(ctx, 0)
		case stPost:
			err = w.Post(ctx, group, 0)
		case stStart:
			err = w.Start(ctx, group, 0)
		case stComplete:
			err = w.Complete(ctx)
		case stWait:
			err = w.Wait(ctx)
		default:
			err = do(r.peer)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
