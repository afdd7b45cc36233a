//go:build linux

package rma

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/op"
)

// Tests run programs as the ranks of a job (internal/jobtest), over
// shared memory on the host and over verbs, and both, in the soft-RoCE VM.
const progEnv = "RIVET_RMA_PROG"

// progs are the programs the tests run as the ranks of a job.
var progs = jobtest.Programs[*fabric.Endpoint]{
	Env: progEnv,
	Init: func(ctx context.Context) (*fabric.Endpoint, error) {
		// Two pretend nodes, ranks 0–1 and the rest: shared memory
		// within each, verbs between them.
		if os.Getenv("RMA_TWO_NODES") == "1" {
			r, _ := strconv.Atoi(os.Getenv("PMI_RANK"))
			os.Setenv("RIVET_NODE", []string{"a", "b"}[min(r/2, 1)])
		}
		return fabric.Init(ctx)
	},
	Close:   (*fabric.Endpoint).Close,
	Rank:    func(ep *fabric.Endpoint) int { return ep.World().Rank() },
	Timeout: 240 * time.Second,
}

func TestMain(m *testing.M) { progs.Main(m) }

var (
	failf = jobtest.Failf
	must  = jobtest.Must
)

func runOK(t *testing.T, n int, prog string, env ...string) string {
	t.Helper()
	return progs.OK(t, n, prog, env...)
}

// providers are the ways a test runs: over shared memory on the host;
// over verbs alone, and shared memory within two pretend nodes with
// verbs between them, in the VM.
func providers(t *testing.T, ranks []int) []struct {
	name string
	n    []int
	env  []string
} {
	type way = struct {
		name string
		n    []int
		env  []string
	}
	if os.Getenv("RIVET_RXE_DEVICES") == "" && os.Getenv(testutil.RequireEnv) != "1" {
		return []way{{"shm", ranks, []string{"RIVET_PROVIDER=shm"}}}
	}
	devs := testutil.RXEDevices(t)
	d := "RIVET_VERBS_DEVICE=" + devs[0]
	return []way{
		{"verbs", ranks, []string{"RIVET_PROVIDER=verbs", d}},
		{"mixed", []int{4}, []string{"RMA_TWO_NODES=1", d}},
	}
}

func run(t *testing.T, prog string, ranks ...int) {
	for _, p := range providers(t, ranks) {
		for _, n := range p.n {
			t.Run(fmt.Sprintf("%s/%d", p.name, n), func(t *testing.T) { runOK(t, n, prog, p.env...) })
		}
	}
}

func TestModel(t *testing.T)     { run(t, "model", 2, 3, 4) }
func TestAtomicity(t *testing.T) { run(t, "atomic", 4) }
func TestLocks(t *testing.T)     { run(t, "locks", 2, 4) }
func TestSleepingTarget(t *testing.T) {
	run(t, "sleep", 2)
}
func TestBadInput(t *testing.T)   { run(t, "bad", 2) }
func TestPSCWGroups(t *testing.T) { run(t, "pscw", 3, 4) }
func TestAllocs(t *testing.T)     { run(t, "allocs", 2) }

func init() {
	progs.Add("model", progModel)
	progs.Add("atomic", progAtomic)
	progs.Add("locks", progLocks)
	progs.Add("sleep", progSleep)
	progs.Add("bad", progBad)
	progs.Add("pscw", progPSCW)
	progs.Add("allocs", progAllocs)
}

// window is one made for a test: its memory here, how to free it, and
// the displacement of 8-byte word d at window rank t.
type window struct {
	*Window
	base []byte
	free func()
	D    func(t, d int) int
}

func unit8(t, d int) int { return d }

// flavors makes a window of size bytes (displacement unit 8, or 1 with
// addresses for a dynamic window) of each flavor the job supports.
func flavors(ctx context.Context, ep *fabric.Endpoint, size int) (names []string, make_ []func() window) {
	c := ep.World()
	names = append(names, "allocate", "create", "dynamic")
	make_ = append(make_,
		func() window {
			w, err := Allocate(ctx, c, size, 8, Info{})
			must(err, "allocate")
			return window{w, w.Base(), func() { must(w.Free(ctx), "free") }, unit8}
		},
		func() window {
			b, err := ep.AllocMem(size)
			must(err, "allocmem")
			w, err := Create(ctx, c, b, 8, Info{})
			must(err, "create")
			return window{w, b, func() { must(w.Free(ctx), "free"); must(ep.FreeMem(b), "freemem") }, unit8}
		},
		func() window {
			w, err := CreateDynamic(ctx, c, Info{})
			must(err, "create dynamic")
			b, err := ep.AllocMem(size)
			must(err, "allocmem")
			must(w.Attach(b), "attach")
			addrs := make([]int64, c.Size())
			must(collectives.Allgather(ctx, c, []int64{int64(Address(b))}, addrs), "allgather")
			return window{w, b, func() {
				must(collectives.Barrier(ctx, c), "barrier")
				must(w.Detach(b), "detach")
				must(w.Free(ctx), "free")
				must(ep.FreeMem(b), "freemem")
			}, func(t, d int) int { return int(addrs[t]) + 8*d }}
		})
	shared := true
	for r := range c.Size() {
		if p := ep.Provider(r); p != "shm" && p != "self" {
			shared = false
		}
	}
	if shared {
		names = append(names, "shared")
		make_ = append(make_, func() window {
			w, err := AllocateShared(ctx, c, size, 8, Info{SameSize: true})
			must(err, "allocate shared")
			// Every process sees its neighbours' memory directly.
			for r := range c.Size() {
				b, unit, err := w.SharedQuery(r)
				must(err, "shared query")
				if len(b) != size || unit != 8 {
					failf("SharedQuery(%d): %d bytes, unit %d", r, len(b), unit)
				}
				// SharedView is the same memory, typed.
				v, unit, err := SharedView[int64](w, r)
				must(err, "shared view")
				if len(v) != size/8 || unit != 8 || &b[0] != (*byte)(unsafe.Pointer(&v[0])) {
					failf("SharedView(%d): %d elements, unit %d, at %p, want %p", r, len(v), unit, &v[0], &b[0])
				}
			}
			return window{w, w.Base(), func() { must(w.Free(ctx), "free") }, unit8}
		})
	}
	return names, make_
}

// Window layout of the model test, in 8-byte displacement units.
const (
	dPut  = 0  // 8 int64: from rank (me-1) mod n
	dSum  = 8  // 8 int64: sum of every rank's r+1
	dSum4 = 16 // 8 int32 (4 units): sum of every rank's r+1
	dMax  = 20 // 8 uint8: max over ranks
	dFop  = 24 // int64: every rank adds 1, fetching
	dCAS  = 25 // int64 at rank 0: every rank tries 0 -> r+1
	dRepl = 26 // float64: some rank's value
	dGacc = 27 // 4 int16 (1 unit): sum, fetching
	words = 32
)

func maxByte(r, i int) uint8 { return uint8((r*37 + i*11) % 256) }

// progModel: every operation in every synchronization mode and window
// flavor, checked against what a sequential execution gives.
func progModel(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	names, makers := flavors(ctx, ep, 8*words)
	for fi, mk := range makers {
		for _, mode := range []string{"fence", "pscw", "lock", "lockall"} {
			where := names[fi] + "/" + mode
			win := mk()
			w, free, D := win.Window, win.free, win.D
			var fops []int64
			var cas int64
			var gacc [4]int16
			open := func() {
				switch mode {
				case "fence":
					must(w.Fence(ctx, NoPrecede), where+": fence")
				case "pscw":
					must(w.Post(ctx, w.Group(), 0), where+": post")
					must(w.Start(ctx, w.Group(), 0), where+": start")
				case "lockall":
					must(w.LockAll(ctx, 0), where+": lockall")
				}
			}
			closeE := func() {
				switch mode {
				case "fence":
					must(w.Fence(ctx, NoSucceed), where+": fence")
				case "pscw":
					must(w.Complete(ctx), where+": complete")
					must(w.Wait(ctx), where+": wait")
				case "lockall":
					must(w.UnlockAll(ctx), where+": unlockall")
					must(collectives.Barrier(ctx, c), "barrier")
				case "lock":
					must(collectives.Barrier(ctx, c), "barrier")
				}
			}
			lock := func(t int, l LockType) {
				if mode == "lock" {
					must(w.Lock(ctx, l, t, 0), where+": lock")
				}
			}
			unlock := func(t int) {
				if mode == "lock" {
					must(w.Unlock(ctx, t), where+": unlock")
				}
			}
			open()
			right := (me + 1) % n
			pat := make([]int64, 8)
			for i := range pat {
				pat[i] = int64(me*100 + i)
			}
			lock(right, Exclusive)
			if mode == "lock" || mode == "lockall" {
				// Passive target: the request-based form.
				q, err := Rput(ctx, w, pat, right, D(right, dPut))
				must(err, where+": rput")
				must(q.Wait(ctx), where+": rput wait")
			} else {
				must(Put(ctx, w, pat, right, D(right, dPut)), where+": put")
			}
			unlock(right)
			for t := range n {
				lock(t, Shared)
				ones := []int64{int64(me + 1), int64(me + 1), int64(me + 1), int64(me + 1), int64(me + 1), int64(me + 1), int64(me + 1), int64(me + 1)}
				if mode == "lockall" {
					q, err := Raccumulate(ctx, w, ones, t, D(t, dSum), op.Sum[int64]())
					must(err, where+": raccumulate")
					must(q.Wait(ctx), where+": raccumulate wait")
				} else {
					must(Accumulate(ctx, w, ones, t, D(t, dSum), op.Sum[int64]()), where+": acc int64")
				}
				small := []int32{int32(me + 1), int32(me + 1), int32(me + 1), int32(me + 1), int32(me + 1), int32(me + 1), int32(me + 1), int32(me + 1)}
				must(Accumulate(ctx, w, small, t, D(t, dSum4), op.Sum[int32]()), where+": acc int32")
				var mx [8]uint8
				for i := range mx {
					mx[i] = maxByte(me, i)
				}
				must(Accumulate(ctx, w, mx[:], t, D(t, dMax), op.Max[uint8]()), where+": acc max")
				v, err := FetchAndOp(ctx, w, 1, t, D(t, dFop), op.Sum[int64]())
				must(err, where+": fetch and op")
				fops = append(fops, v)
				must(Accumulate(ctx, w, []float64{float64(me) + 0.5}, t, D(t, dRepl), op.Replace[float64]()), where+": replace")
				var got [4]int16
				if mode == "lock" || mode == "lockall" {
					q, err := RgetAccumulate(ctx, w, []int16{1, 2, 3, 4}, got[:], t, D(t, dGacc), op.Sum[int16]())
					must(err, where+": rget accumulate")
					must(q.Wait(ctx), where+": rget accumulate wait")
				} else {
					must(GetAccumulate(ctx, w, []int16{1, 2, 3, 4}, got[:], t, D(t, dGacc), op.Sum[int16]()), where+": get accumulate")
				}
				if t == 0 {
					gacc = got
				}
				unlock(t)
			}
			lock(0, Shared)
			old, err := CompareAndSwap(ctx, w, int64(0), int64(me+1), 0, D(0, dCAS))
			must(err, where+": cas")
			cas = old
			unlock(0)
			closeE()
			// Check: this process's own memory, and a get of the
			// right neighbour's.
			base := win.base
			i64 := unsafe.Slice((*int64)(unsafe.Pointer(&base[0])), words)
			left := (me + n - 1) % n
			for i := range 8 {
				if i64[dPut+i] != int64(left*100+i) {
					failf("%s: put from rank %d: word %d is %d", where, left, i, i64[dPut+i])
				}
				if want := int64(n * (n + 1) / 2); i64[dSum+i] != want {
					failf("%s: int64 sum word %d is %d, want %d", where, i, i64[dSum+i], want)
				}
				i32 := unsafe.Slice((*int32)(unsafe.Pointer(&base[8*dSum4])), 8)
				if want := int32(n * (n + 1) / 2); i32[i] != want {
					failf("%s: int32 sum %d is %d, want %d", where, i, i32[i], want)
				}
				var want uint8
				for r := range n {
					want = max(want, maxByte(r, i))
				}
				if base[8*dMax+i] != want {
					failf("%s: max byte %d is %d, want %d", where, i, base[8*dMax+i], want)
				}
			}
			if i64[dFop] != int64(n) {
				failf("%s: fetch-and-op total %d, want %d", where, i64[dFop], n)
			}
			f := *(*float64)(unsafe.Pointer(&base[8*dRepl]))
			if f != float64(int(f))+0.5 || int(f) < 0 || int(f) >= n {
				failf("%s: replaced value %v is no rank's", where, f)
			}
			i16 := unsafe.Slice((*int16)(unsafe.Pointer(&base[8*dGacc])), 4)
			for i := range 4 {
				if i16[i] != int16(n*(i+1)) {
					failf("%s: int16 sum %d is %d, want %d", where, i, i16[i], n*(i+1))
				}
			}
			// Fetch-and-op results, gathered: at each target the n
			// fetched values are 0..n-1 in some order. CAS: exactly one
			// rank saw 0, and rank 0's word names it. GetAccumulate at
			// target 0: previous values are multiples of the addends.
			allF := make([]int64, n*n)
			must(collectives.Allgather(ctx, c, fops, allF), "allgather")
			for t := range n {
				seen := make([]bool, n)
				for r := range n {
					v := allF[r*n+t]
					if v < 0 || v >= int64(n) || seen[v] {
						failf("%s: fetch-and-op at %d fetched %d (twice, or out of range)", where, t, v)
					}
					seen[v] = true
				}
			}
			casAll := make([]int64, n)
			must(collectives.Allgather(ctx, c, []int64{cas}, casAll), "allgather")
			winners := 0
			for r, v := range casAll {
				if v == 0 {
					winners++
					if me == 0 && i64[dCAS] != int64(r+1) {
						failf("%s: CAS word %d, but rank %d won", where, i64[dCAS], r)
					}
				} else if v < 1 || v > int64(n) {
					failf("%s: rank %d's CAS saw %d", where, r, v)
				}
			}
			if winners != 1 {
				failf("%s: %d CAS winners", where, winners)
			}
			for i, v := range gacc {
				if int(v)%(i+1) != 0 || int(v) >= n*(i+1) {
					failf("%s: get-accumulate element %d saw %d", where, i, v)
				}
			}
			// A get of the right neighbour's put words, in a new epoch.
			back := make([]int64, 8)
			open()
			lock(right, Shared)
			if mode == "lockall" {
				q, err := Rget(ctx, w, back, right, D(right, dPut))
				must(err, where+": rget")
				must(q.Wait(ctx), where+": rget wait")
				must(w.Flush(ctx, right), where+": flush")
			} else {
				must(Get(ctx, w, back, right, D(right, dPut)), where+": get")
			}
			unlock(right)
			closeE()
			for i := range back {
				if back[i] != int64(me*100+i) {
					failf("%s: get of rank %d's word %d: %d", where, right, i, back[i])
				}
			}
			free()
		}
	}
	return nil
}

// progAtomic: 4 ranks × 10 000 concurrent updates of one element at rank
// 0, for each path: an 8-byte integer sum (the NIC's fetch-and-add, or a
// CPU add), a 4-byte sum (compare-and-swap on the containing word),
// fetch-and-op, and compare-and-swap increments.
func progAtomic(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	n := c.Size()
	const iters = 10000
	w, err := Allocate(ctx, c, 64, 1, Info{})
	must(err, "allocate")
	must(w.LockAll(ctx, 0), "lockall")
	for i := 0; i < iters; i++ {
		must(Accumulate(ctx, w, []int64{1}, 0, 0, op.Sum[int64]()), "acc int64")
		must(Accumulate(ctx, w, []int32{1}, 0, 12, op.Sum[int32]()), "acc int32")
		_, err := FetchAndOp(ctx, w, int64(1), 0, 16, op.Sum[int64]())
		must(err, "fop")
		_, err = FetchAndOp(ctx, w, uint8(1), 0, 25, op.Sum[uint8]())
		must(err, "fop byte")
	}
	for i := 0; i < iters/10; i++ {
		for {
			v, err := FetchAndOp(ctx, w, 0, 0, 32, op.NoOp[int64]())
			must(err, "atomic read")
			old, err := CompareAndSwap(ctx, w, v, v+1, 0, 32)
			must(err, "cas")
			if old == v {
				break
			}
		}
	}
	must(w.UnlockAll(ctx), "unlockall")
	must(collectives.Barrier(ctx, c), "barrier")
	if c.Rank() == 0 {
		b := w.Base()
		for _, x := range []struct {
			name string
			got  int64
			want int64
		}{
			{"int64 sums", *(*int64)(unsafe.Pointer(&b[0])), int64(n * iters)},
			{"int32 sums", int64(*(*int32)(unsafe.Pointer(&b[12]))), int64(n * iters)},
			{"fetch-and-ops", *(*int64)(unsafe.Pointer(&b[16])), int64(n * iters)},
			{"byte fetch-and-ops", int64(b[25]), int64(uint8(n * iters))},
			{"CAS increments", *(*int64)(unsafe.Pointer(&b[32])), int64(n * iters / 10)},
		} {
			if x.got != x.want {
				failf("%s: total %d, want %d", x.name, x.got, x.want)
			}
		}
		// The neighbours of the updated elements are untouched.
		if b[8] != 0 || b[11] != 0 || b[24] != 0 || b[26] != 0 {
			failf("bytes next to the updated elements changed: % x", b[:40])
		}
	}
	return w.Free(ctx)
}

// progLocks: an exclusive lock excludes (unlocked read-modify-writes
// under it lose no update), shared locks share, and an exclusive lock
// waits for a shared holder.
func progLocks(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	w, err := Allocate(ctx, c, 64, 8, Info{})
	must(err, "allocate")
	const rounds = 200
	v := make([]int64, 1)
	for i := 0; i < rounds; i++ {
		must(w.Lock(ctx, Exclusive, 0, 0), "lock")
		must(Get(ctx, w, v, 0, 0), "get")
		must(w.Flush(ctx, 0), "flush")
		v[0]++
		must(Put(ctx, w, v, 0, 0), "put")
		must(w.Unlock(ctx, 0), "unlock")
	}
	must(collectives.Barrier(ctx, c), "barrier")
	if me == 0 {
		if got := *(*int64)(unsafe.Pointer(&w.Base()[0])); got != int64(n*rounds) {
			failf("exclusive read-modify-writes: %d, want %d", got, n*rounds)
		}
	}
	// Shared locks share: rank 0 holds one on rank n-1 while rank 1 takes
	// another; an exclusive one then waits until both are gone.
	tgt := n - 1
	switch me {
	case 0:
		must(w.Lock(ctx, Shared, tgt, 0), "shared lock")
		must(c.Send(ctx, []byte{1}, 1, 1), "send")
		_, err := c.Recv(ctx, make([]byte, 1), 1, 2)
		must(err, "recv")
		must(w.Unlock(ctx, tgt), "unlock")
	case 1:
		_, err := c.Recv(ctx, make([]byte, 1), 0, 1)
		must(err, "recv")
		// Rank 0 keeps its lock until this one is granted: if shared
		// locks excluded each other this would wait until the deadline.
		tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		must(w.Lock(tctx, Shared, tgt, 0), "second shared lock while rank 0 holds one")
		cancel()
		must(w.Unlock(ctx, tgt), "unlock")
		must(c.Send(ctx, []byte{1}, 0, 2), "send")
	}
	must(collectives.Barrier(ctx, c), "barrier")
	// An exclusive lock is not granted while a shared one is held.
	if me == 0 {
		must(w.Lock(ctx, Shared, tgt, 0), "shared lock")
		must(c.Send(ctx, []byte{1}, 1, 3), "send")
		_, err := c.Recv(ctx, make([]byte, 1), 1, 4)
		must(err, "recv")
		must(w.Unlock(ctx, tgt), "unlock")
	} else if me == 1 {
		_, err := c.Recv(ctx, make([]byte, 1), 0, 3)
		must(err, "recv")
		tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err = w.Lock(tctx, Exclusive, tgt, 0)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			failf("exclusive lock while rank 0 holds a shared one: %v", err)
		}
		must(c.Send(ctx, []byte{1}, 0, 4), "send")
		must(w.Lock(ctx, Exclusive, tgt, 0), "exclusive lock once free")
		must(w.Unlock(ctx, tgt), "unlock")
	}
	must(collectives.Barrier(ctx, c), "barrier")
	return w.Free(ctx)
}

// progSleep: the target spins in plain Go, calling nothing in Rivet,
// while the origin runs whole passive-target epochs on it; the origin's
// last put ends the target's spin. A target that had to take part would
// never see it.
func progSleep(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	w, err := Allocate(ctx, c, 64, 8, Info{})
	must(err, "allocate")
	if c.Rank() == 1 {
		flag := (*int64)(unsafe.Pointer(&w.Base()[56]))
		deadline := time.Now().Add(60 * time.Second)
		for atomic.LoadInt64(flag) == 0 {
			if time.Now().After(deadline) {
				failf("the origin's epochs did not finish while the target stayed out of the library")
			}
		}
		if got := *(*int64)(unsafe.Pointer(&w.Base()[0])); got != 100 {
			failf("counter %d, want 100", got)
		}
	} else if c.Rank() == 0 {
		for i := 0; i < 50; i++ {
			must(w.Lock(ctx, Exclusive, 1, 0), "lock")
			_, err := FetchAndOp(ctx, w, int64(1), 1, 0, op.Sum[int64]())
			must(err, "fop")
			must(Accumulate(ctx, w, []int64{1}, 1, 0, op.Sum[int64]()), "acc")
			got := make([]int64, 1)
			must(Get(ctx, w, got, 1, 0), "get")
			must(w.Unlock(ctx, 1), "unlock")
		}
		must(w.Lock(ctx, Shared, 1, 0), "lock")
		must(Put(ctx, w, []int64{1}, 1, 7), "put flag")
		must(w.Unlock(ctx, 1), "unlock")
	}
	return w.Free(ctx)
}

// progBad: the bad-input table. Each error comes before anything reaches
// the NIC, and the window stays usable after it.
func progBad(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	if _, err := Create(ctx, c, make([]byte, 64), 1, Info{}); !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "AllocMem") {
		failf("Create over Go memory: %v", err)
	}
	w, err := Allocate(ctx, c, 64, 8, Info{})
	must(err, "allocate")
	i8 := make([]int64, 1)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"put outside an epoch", Put(ctx, w, i8, 1, 0), ErrEpoch},
		{"unlock without lock", w.Unlock(ctx, 1), ErrEpoch},
		{"complete without start", w.Complete(ctx), ErrEpoch},
		{"wait without post", w.Wait(ctx), ErrEpoch},
		{"flush outside passive target", w.Flush(ctx, 1), ErrEpoch},
		{"lock of a rank outside", w.Lock(ctx, Shared, c.Size(), 0), fabric.ErrRank},
		{"lock type", w.Lock(ctx, LockType(9), 1, 0), fabric.ErrInvalid},
		{"fence assertion bits", w.Fence(ctx, Assert(0x80)), fabric.ErrInvalid},
	} {
		if !errors.Is(tc.err, tc.want) {
			failf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	must(w.Lock(ctx, Shared, 1, 0), "lock")
	_, casFloat := CompareAndSwap(ctx, w, 1.0, 2.0, 1, 0)
	_, fopUser := FetchAndOp(ctx, w, int64(1), 1, 0, op.New("mine", true, func(in, inout []int64) {}))
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"lock twice", w.Lock(ctx, Shared, 1, 0), ErrEpoch},
		{"put past the end", Put(ctx, w, make([]int64, 2), 1, 7), ErrRange},
		{"negative displacement", Put(ctx, w, i8, 1, -1), ErrRange},
		{"get past the end", Get(ctx, w, make([]byte, 65), 1, 0), ErrRange},
		{"cas on a float", casFloat, ErrType},
		{"user op in an accumulate", fopUser, ErrType},
		{"mix fence with passive target", w.Fence(ctx, 0), ErrEpoch},
		{"pointer elements", Put(ctx, w, []*int{nil}, 1, 0), ErrType},
		{"zero op", Accumulate(ctx, w, i8, 1, 0, op.Op[int64]{}), op.ErrOp},
		{"free with a lock held", w.Free(ctx), ErrEpoch},
	} {
		if !errors.Is(tc.err, tc.want) {
			failf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	// Still usable.
	must(Put(ctx, w, []int64{5}, 1, 0), "put after errors")
	must(w.Unlock(ctx, 1), "unlock")
	must(collectives.Barrier(ctx, c), "barrier")
	if c.Rank() == 1 && *(*int64)(unsafe.Pointer(&w.Base()[0])) != 5 {
		failf("put after errors did not land")
	}
	// A fence epoch then Lock: an error until a NoSucceed fence.
	must(w.Fence(ctx, 0), "fence")
	if err := w.Lock(ctx, Shared, 1, 0); !errors.Is(err, ErrEpoch) {
		failf("lock inside a fence epoch: %v", err)
	}
	must(w.Fence(ctx, NoSucceed), "fence")
	must(w.Free(ctx), "free")
	for _, err := range []error{w.Free(ctx), Put(ctx, w, i8, 1, 0), w.Fence(ctx, 0)} {
		if !errors.Is(err, ErrFreed) {
			failf("a freed window: %v", err)
		}
	}
	// Accumulate elements must be aligned to their size, and at most 8
	// bytes: a window with displacement unit 1 can name an unaligned one.
	u1, err := Allocate(ctx, c, 32, 1, Info{})
	must(err, "allocate unit 1")
	must(u1.LockAll(ctx, 0), "lockall")
	if err := Accumulate(ctx, u1, []int32{1}, 1, 2, op.Sum[int32]()); !errors.Is(err, ErrType) {
		failf("an int32 accumulate at byte 2: %v", err)
	}
	if _, err := FetchAndOp(ctx, u1, complex(1, 1), 1, 0, op.Sum[complex128]()); !errors.Is(err, ErrType) {
		failf("a 16-byte element: %v", err)
	}
	must(Accumulate(ctx, u1, []int32{1}, 1, 4, op.Sum[int32]()), "an aligned int32 accumulate")
	must(u1.UnlockAll(ctx), "unlockall")
	must(u1.Free(ctx), "free unit 1")
	// A dynamic window: Go memory cannot be attached; a detached region
	// is found missing at the origin's next epoch.
	dw, err := CreateDynamic(ctx, c, Info{})
	must(err, "create dynamic")
	if err := dw.Attach(make([]byte, 64)); !errors.Is(err, ErrMemory) {
		failf("Attach of Go memory: %v", err)
	}
	mem, err := ep.AllocMem(64)
	must(err, "allocmem")
	if err := dw.Attach(mem[8:13:13]); !errors.Is(err, ErrMemory) {
		failf("Attach of 5 bytes with no room for their word's padding: %v", err)
	}
	must(dw.Attach(mem), "attach")
	addrs := make([]int64, c.Size())
	must(collectives.Allgather(ctx, c, []int64{int64(Address(mem))}, addrs), "allgather")
	must(dw.LockAll(ctx, 0), "lockall")
	must(Put(ctx, dw, []int64{7}, 1, int(addrs[1])), "put to attached memory")
	if err := Put(ctx, dw, []int64{7}, 1, int(addrs[1])+64); !errors.Is(err, ErrRange) {
		failf("put past attached memory: %v", err)
	}
	must(dw.UnlockAll(ctx), "unlockall")
	must(collectives.Barrier(ctx, c), "barrier")
	must(dw.Detach(mem), "detach")
	must(collectives.Barrier(ctx, c), "barrier")
	must(dw.LockAll(ctx, 0), "lockall")
	if err := Put(ctx, dw, []int64{7}, 1, int(addrs[1])); !errors.Is(err, ErrRange) {
		failf("put to detached memory: %v", err)
	}
	must(dw.UnlockAll(ctx), "unlockall")
	must(dw.Free(ctx), "free dynamic")
	must(ep.FreeMem(mem), "freemem")
	// no_locks.
	nl, err := Allocate(ctx, c, 8, 1, Info{NoLocks: true})
	must(err, "allocate no_locks")
	if err := nl.Lock(ctx, Shared, 0, 0); !errors.Is(err, ErrEpoch) {
		failf("lock on a no_locks window: %v", err)
	}
	return nl.Free(ctx)
}

// progAllocs: steady-state put, get, fetch-and-op, compare-and-swap,
// flush and lock/unlock allocate nothing.
func progAllocs(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	w, err := Allocate(ctx, c, 64, 8, Info{})
	must(err, "allocate")
	buf, err := ep.AllocMem(64)
	must(err, "allocmem")
	src := unsafe.Slice((*int64)(unsafe.Pointer(&buf[0])), 8)
	if c.Rank() == 0 {
		sum, noop := op.Sum[int64](), op.NoOp[int64]()
		for _, tc := range []struct {
			name string
			f    func()
		}{
			{"lock/unlock", func() { must(w.Lock(ctx, Exclusive, 1, 0), "lock"); must(w.Unlock(ctx, 1), "unlock") }},
			{"put+flush", func() { must(Put(ctx, w, src[:1], 1, 0), "put"); must(w.Flush(ctx, 1), "flush") }},
			{"get+flush", func() { must(Get(ctx, w, src[1:2], 1, 0), "get"); must(w.Flush(ctx, 1), "flush") }},
			{"fetch-and-op", func() { _, err := FetchAndOp(ctx, w, 1, 1, 1, sum); must(err, "fop") }},
			{"atomic read", func() { _, err := FetchAndOp(ctx, w, 0, 1, 1, noop); must(err, "read") }},
			{"compare-and-swap", func() { _, err := CompareAndSwap(ctx, w, int64(0), 1, 1, 2); must(err, "cas") }},
			{"compare-and-swap int32", func() { _, err := CompareAndSwap(ctx, w, int32(0), 1, 1, 3); must(err, "cas") }},
		} {
			passive := tc.name != "lock/unlock"
			if passive {
				must(w.LockAll(ctx, 0), "lockall")
			}
			n := testing.AllocsPerRun(200, tc.f) // its warm-up call is not counted
			if passive {
				must(w.UnlockAll(ctx), "unlockall")
			}
			if n != 0 {
				failf("%s: %v allocations per call", tc.name, n)
			}
		}
	}
	must(collectives.Barrier(ctx, c), "barrier")
	// A PSCW round, each side's part: 201 rounds (AllocsPerRun's warm-up
	// and 200), ranks 0 and 1; the groups are made once, as a program
	// would.
	if me := c.Rank(); me < 2 {
		peer, err := w.Group().Incl([]int{1 - me})
		must(err, "peer")
		side := func() { must(w.Post(ctx, peer, 0), "post"); must(w.Wait(ctx), "wait") }
		if me == 0 {
			side = func() {
				must(w.Start(ctx, peer, 0), "start")
				must(Put(ctx, w, src[:1], 1, 0), "put")
				must(w.Complete(ctx), "complete")
			}
		}
		if n := testing.AllocsPerRun(200, side); n != 0 {
			failf("PSCW, rank %d's side: %v allocations per round", me, n)
		}
	}
	must(collectives.Barrier(ctx, c), "barrier")
	must(ep.FreeMem(buf), "freemem")
	return w.Free(ctx)
}

// progPSCW: post/start/complete/wait with groups that overlap — each
// rank exposes itself to its two neighbours and accesses both, many
// rounds in a row, some closed by Test — and a rank outside a group
// that starts late; every value lands in its round.
func progPSCW(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	w, err := Allocate(ctx, c, 16*8, 8, Info{})
	must(err, "allocate")
	left, right := (me+n-1)%n, (me+1)%n
	nb, err := w.Group().Incl([]int{left, right})
	if left == right {
		nb, err = w.Group().Incl([]int{left})
	}
	must(err, "neighbours")
	cells := unsafe.Slice((*int64)(unsafe.Pointer(&w.Base()[0])), 16)
	for round := int64(1); round <= 20; round++ {
		must(w.Post(ctx, nb, 0), "post")
		must(w.Start(ctx, nb, 0), "start")
		must(Put(ctx, w, []int64{round*100 + int64(me)}, right, 0), "put right")
		must(Put(ctx, w, []int64{round*100 + int64(me)}, left, 1), "put left")
		must(w.Complete(ctx), "complete")
		if round%2 == 0 {
			for {
				done, err := w.Test()
				must(err, "test")
				if done {
					break
				}
			}
		} else {
			must(w.Wait(ctx), "wait")
		}
		if cells[0] != round*100+int64(left) || cells[1] != round*100+int64(right) {
			failf("round %d: cells %d %d, want %d %d", round, cells[0], cells[1], round*100+int64(left), round*100+int64(right))
		}
	}
	// Rank 0 exposes itself to every other rank at once; they access it
	// one after another, each adding to a cell.
	if me == 0 {
		others, err := w.Group().Excl([]int{0})
		must(err, "others")
		// A process outside the window's group is an error, not a hang.
		outside, _ := fabric.NewGroup([]int{n})
		if err := w.Post(ctx, outside, 0); !errors.Is(err, fabric.ErrGroup) {
			failf("Post to world rank %d, outside the window: %v, want ErrGroup", n, err)
		}
		must(w.Post(ctx, others, 0), "post")
		must(w.Wait(ctx), "wait")
		if cells[2] != int64(n*(n-1)/2) {
			failf("sum of the starters' ranks: %d, want %d", cells[2], n*(n-1)/2)
		}
	} else {
		zero, err := w.Group().Incl([]int{0})
		must(err, "rank 0")
		must(w.Start(ctx, zero, 0), "start")
		must(Accumulate(ctx, w, []int64{int64(me)}, 0, 2, op.Sum[int64]()), "accumulate")
		must(w.Complete(ctx), "complete")
	}
	return w.Free(ctx)
}
