//go:build linux

package rma

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

// The failure matrix: window flavour × synchronization × the victim's
// role × provider. Four ranks: the origin (0) writes to the target (1)
// in an epoch; a bystander (2) takes no part; the lock owner (3) holds a
// lock (passive synchronizations only) and dies holding it when it is
// the victim. The victim dies in the middle of the epoch, after its own
// part of it; the survivors wait until they know, then synchronize, and
// check: the synchronizations that involve the victim raise
// ErrProcFailed and those that do not succeed, none waits; every byte of
// the target's memory outside the ranges Undefined reports holds what it
// must, and what the dead origin wrote is inside them; the origin
// reports the ranges it could not complete.
const (
	fOrigin    = 0
	fTarget    = 1
	fBystander = 2
	fOwner     = 3
)

var (
	failSyncs = []string{"fence", "pscw", "lock", "lockall", "flush"}
	failRoles = map[string]int{"origin": fOrigin, "target": fTarget, "bystander": fBystander, "owner": fOwner}
)

func init() {
	progs.Add("fail", progFail)
	progs.Add("revoke", progRevoke)
	progs.Add("deadowner", progDeadOwner)
}

// TestDeadOwner: rank 3 takes the exclusive lock of every rank and dies
// holding them; every survivor then tries each lock, shared and
// exclusive — already waiting when the failure is not known yet — and
// each attempt raises ErrProcFailed instead of spinning, as LockAll does.
func TestDeadOwner(t *testing.T) {
	for _, p := range providers(t, []int{4}) {
		if p.name == "mixed" {
			continue
		}
		t.Run(p.name, func(t *testing.T) { failJob(t, "deadowner", fOwner, p.env) })
	}
}

func progDeadOwner(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	w, err := Allocate(ctx, c, 64, 8, Info{})
	must(err, "allocate")
	if me == fOwner {
		for r := range n {
			must(w.Lock(ctx, Exclusive, r, 0), "owner's lock")
		}
	}
	must(collectives.Barrier(ctx, c), "barrier")
	dieWhenReady(ctx, c, fOwner, []int{0, 1, 2, 3})
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i := range n {
		r := (me + i) % n
		for _, l := range []LockType{Shared, Exclusive} {
			err := w.Lock(sctx, l, r, 0)
			if !errors.Is(err, fabric.ErrProcFailed) {
				failf("%v lock of rank %d, whose lock a dead process holds: %v", l, r, err)
			}
		}
	}
	if err := w.LockAll(sctx, 0); !errors.Is(err, fabric.ErrProcFailed) {
		failf("lock all: %v", err)
	}
	if err := w.Free(sctx); !errors.Is(err, fabric.ErrProcFailed) {
		failf("free: %v", err)
	}
	return nil
}

func TestFailureMatrix(t *testing.T) {
	for _, p := range providers(t, []int{4}) {
		if p.name == "mixed" {
			continue
		}
		for _, fl := range []string{"allocate", "create", "dynamic", "shared"} {
			if fl == "shared" && p.name != "shm" {
				continue
			}
			for _, sync := range failSyncs {
				for _, role := range []string{"origin", "target", "bystander", "owner"} {
					if role == "owner" && (sync == "fence" || sync == "pscw") {
						continue // no locks
					}
					t.Run(fmt.Sprintf("%s/%s/%s/%s", p.name, fl, sync, role), func(t *testing.T) {
						env := append([]string{"FAIL_FLAVOR=" + fl, "FAIL_SYNC=" + sync, "FAIL_ROLE=" + role}, p.env...)
						failJob(t, "fail", failRoles[role], env)
					})
				}
			}
		}
	}
}

// failJob runs prog on four ranks, killing victim: every other rank must
// finish.
func failJob(t *testing.T, prog string, victim int, env []string) {
	t.Helper()
	out, errs, st := progs.Run(t, 4, prog, true, env...)
	if st != 128+9 {
		t.Fatalf("status %d, want 137 (the victim killed)\n%s\n%s", st, out, errs)
	}
	for r := range 4 {
		if r != victim && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
			t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
		}
	}
}

// failPattern is what word i of rank r's window holds before anything is
// written; failX what the origin writes.
func failPattern(r, i int) int64 { return int64(r)<<32 | int64(i) }
func failX(i int) int64          { return -1000 - int64(i) }

// The ranges the origin writes, in words: R1 before a flush (the flush
// synchronization only), R the epoch's write that a failure interrupts.
const (
	failWords        = 64
	r1Lo, r1Hi       = 4, 8
	failLo, failHi   = 16, 24
	failGetLo, failN = 40, 8
)

func progFail(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me := c.Rank()
	flavor, sync := os.Getenv("FAIL_FLAVOR"), os.Getenv("FAIL_SYNC")
	v := failRoles[os.Getenv("FAIL_ROLE")]
	names, makers := flavors(ctx, ep, 8*failWords)
	var win window
	for i, n := range names {
		if n == flavor {
			win = makers[i]()
		}
	}
	if win.Window == nil {
		failf("no flavour %q here", flavor)
	}
	mine := make([]int64, failWords)
	for i := range mine {
		mine[i] = failPattern(me, i)
	}
	copy(win.base, bytesOf(mine))
	must(collectives.Barrier(ctx, c), "barrier")

	x := make([]int64, failWords)
	for i := range x {
		x[i] = failX(i)
	}
	got, err := ep.AllocMem(8 * failN)
	must(err, "allocmem")
	var rput *Request

	// The epoch, each rank's part of it before the victim dies.
	switch sync {
	case "fence":
		must(win.Fence(ctx, 0), "fence")
		if me == fOrigin {
			must(Put(ctx, win.Window, x[failLo:failHi], fTarget, win.D(fTarget, failLo)), "put")
			must(Get(ctx, win.Window, int64s(got), fTarget, win.D(fTarget, failGetLo)), "get")
		}
	case "pscw":
		switch me {
		case fTarget:
			g, err := win.Group().Incl([]int{fOrigin})
			must(err, "group")
			must(win.Post(ctx, g, 0), "post")
		case fOrigin:
			g, err := win.Group().Incl([]int{fTarget})
			must(err, "group")
			must(win.Start(ctx, g, 0), "start")
			must(Put(ctx, win.Window, x[failLo:failHi], fTarget, win.D(fTarget, failLo)), "put")
			must(Get(ctx, win.Window, int64s(got), fTarget, win.D(fTarget, failGetLo)), "get")
		}
	default:
		switch me {
		case fOwner:
			switch sync {
			case "lock":
				must(win.Lock(ctx, Exclusive, fBystander, 0), "owner's lock")
			case "lockall":
				must(win.LockAll(ctx, 0), "owner's lock all")
			case "flush":
				must(win.Lock(ctx, Shared, fTarget, 0), "owner's lock")
			}
		case fOrigin:
			if sync == "lockall" {
				must(win.LockAll(ctx, 0), "lock all")
			} else {
				must(win.Lock(ctx, Shared, fTarget, 0), "lock")
			}
			if sync == "flush" {
				must(Put(ctx, win.Window, x[r1Lo:r1Hi], fTarget, win.D(fTarget, r1Lo)), "put R1")
				must(win.Flush(ctx, fTarget), "flush R1")
			}
			rput, err = Rput(ctx, win.Window, x[failLo:failHi], fTarget, win.D(fTarget, failLo))
			must(err, "rput")
			must(Get(ctx, win.Window, int64s(got), fTarget, win.D(fTarget, failGetLo)), "get")
		}
	}
	alive := []int{0, 1, 2, 3}
	dieWhenReady(ctx, c, v, alive)
	awaitKnown(ctx, ep, v)
	if g := win.GetFailed(); g.Size() != 1 || g.Members()[0] != v {
		failf("GetFailed: %v, want rank %d alone", g.Members(), v)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	// The synchronizations after the death: which must raise.
	check := func(what string, err error, mustFail bool) {
		switch {
		case mustFail && !errors.Is(err, fabric.ErrProcFailed):
			failf("%s with rank %d dead: %v, want ErrProcFailed", what, v, err)
		case !mustFail && err != nil:
			failf("%s with rank %d dead: %v, want success", what, v, err)
		}
	}
	originDone := false
	switch sync {
	case "fence":
		check("fence", win.Fence(sctx, 0), true)
		originDone = me == fOrigin && v != fTarget
	case "pscw":
		switch me {
		case fOrigin:
			check("complete", win.Complete(sctx), v == fTarget)
			originDone = v != fTarget
		case fTarget:
			if flavor == "create" {
				// Test, the nonblocking Wait: a failed origin counts as
				// done, and Test raises with true.
				for {
					done, err := win.Test()
					if done || err != nil {
						if !done {
							failf("test: %v, and not done", err)
						}
						check("test", err, v == fOrigin)
						break
					}
					if sctx.Err() != nil {
						failf("test: never done")
					}
					time.Sleep(100 * time.Microsecond)
				}
			} else {
				check("wait", win.Wait(sctx), v == fOrigin)
			}
		}
	default:
		if me == fOrigin {
			if sync == "flush" {
				check("flush", win.Flush(sctx, fTarget), v == fTarget)
			}
			check("rput's wait", rput.Wait(sctx), false)
			if sync == "lockall" {
				check("unlock all", win.UnlockAll(sctx), true)
			} else {
				check("unlock", win.Unlock(sctx, fTarget), v == fTarget || v == fOwner && sync == "flush")
			}
			originDone = v != fTarget
		}
		if v == fOwner {
			// The dead owner's lock can never be taken again, at any
			// target it held: shared or exclusive, by anyone.
			held := map[string][]int{"lock": {fBystander}, "flush": {fTarget}, "lockall": {0, 1, 2}}[sync]
			for _, r := range held {
				for _, l := range []LockType{Shared, Exclusive} {
					err := win.Lock(sctx, l, r, 0)
					if err == nil {
						win.Unlock(sctx, r)
					}
					check(fmt.Sprintf("%v lock of rank %d", l, r), err, true)
				}
			}
			check("lock all", win.LockAll(sctx, 0), true)
		}
	}

	// A live owner gives its lock back: that raises if the lock has a
	// dead holder too (the origin's, at the target), or its target died.
	if me == fOwner && v != fOwner {
		var err error
		switch sync {
		case "lock":
			err = win.Unlock(sctx, fBystander)
		case "lockall":
			err = win.UnlockAll(sctx)
		case "flush":
			err = win.Unlock(sctx, fTarget)
		}
		if err != nil && !errors.Is(err, fabric.ErrProcFailed) {
			failf("owner's unlock: %v", err)
		}
	}

	// The origin reports what its failed synchronizations left undefined.
	if me == fOrigin && v == fTarget {
		u := win.Undefined()
		lo, hi := uint64(win.D(fTarget, failLo)), uint64(win.D(fTarget, failHi))
		if win.Flavor() != FlavorDynamic {
			lo, hi = 8*lo, 8*hi
		}
		if !coveredBy(u.Target, fTarget, lo, hi) {
			failf("Undefined().Target %v does not cover [%d, %d) of rank %d", u.Target, lo, hi, fTarget)
		}
		// Over verbs the get's buffer may be half-written: reported.
		// (On shared memory a get is a copy, complete when it returns.)
		if a := uint64(Address(got)); ep.Provider(fTarget) == "verbs" && !coveredBy(u.Local, fTarget, a, a+8*failN) {
			failf("Undefined().Local %v does not hold the get's buffer [%#x, %#x)", u.Local, a, a+8*failN)
		}
		if sync == "flush" && ep.Provider(fTarget) == "verbs" {
			// (On shared memory a flush with nothing to do records
			// nothing: R1 stays with R.)
			r1lo, r1hi := uint64(win.D(fTarget, r1Lo)), uint64(win.D(fTarget, r1Hi))
			if win.Flavor() != FlavorDynamic {
				r1lo, r1hi = 8*r1lo, 8*r1hi
			}
			for _, s := range u.Target {
				if s.Off < r1hi && r1lo < s.Off+s.Len {
					failf("Undefined().Target %v holds R1 [%d, %d), which a flush completed", u.Target, r1lo, r1hi)
				}
			}
		}
	}
	// The origin tells the target it is done, and whether its writes are
	// complete there.
	if me == fOrigin && v != fTarget {
		b := []byte{0}
		if originDone {
			b[0] = 1
		}
		must(c.Send(ctx, b, fTarget, 7), "tell the target")
	}
	if me == fTarget {
		complete := false
		if v != fOrigin {
			b := []byte{0}
			_, err := c.Recv(ctx, b, fOrigin, 7)
			must(err, "hear from the origin")
			complete = b[0] == 1
		}
		checkTargetMemory(win, v, sync, complete)
	}
	if v == fOrigin && me != fTarget {
		if u := win.Undefined(); len(u.Exposed) != 0 {
			failf("rank %d reports %v undefined, and the dead origin never wrote to it", me, u.Exposed)
		}
	}
	// Free raises at some ranks, perhaps not all, but never waits, and
	// releases everything.
	err = win.Free(sctx)
	if err != nil && !errors.Is(err, fabric.ErrProcFailed) {
		failf("free: %v", err)
	}
	if err := win.Free(sctx); !errors.Is(err, ErrFreed) {
		failf("second free: %v, want ErrFreed", err)
	}
	if flavor != "allocate" && flavor != "shared" {
		must(ep.FreeMem(win.base), "freemem")
	}
	return ep.FreeMem(got)
}

// checkTargetMemory checks the target's memory against what Undefined
// says: every word outside the reported ranges holds the pattern, or what
// the origin wrote when its epoch completed (complete) or a flush did
// (R1); what the dead origin wrote is reported.
func checkTargetMemory(win window, v int, sync string, complete bool) {
	u := win.Undefined()
	mem := int64s(win.base)
	var total uint64
	for _, s := range u.Exposed {
		if s.Rank != v || v != fOrigin {
			failf("Undefined().Exposed %v: only the dead origin %d wrote here", u.Exposed, fOrigin)
		}
		total += s.Len
	}
	// Scoped: no more than the origin was writing (on shared memory a
	// flush that had nothing to do leaves R1 recorded with R).
	most := uint64(8 * (failHi - failLo))
	if sync == "flush" {
		most += 8 * (r1Hi - r1Lo)
	}
	if total > most {
		failf("Undefined().Exposed %v: %d bytes, more than the %d the origin was writing", u.Exposed, total, most)
	}
	base := uint64(0)
	if win.Flavor() == FlavorDynamic {
		base = uint64(Address(win.base))
	}
	for i, got := range mem {
		off := base + uint64(8*i)
		if coveredBy(u.Exposed, fOrigin, off, off+8) {
			continue
		}
		want := failPattern(fTarget, i)
		switch {
		case i >= failLo && i < failHi && complete:
			want = failX(i)
		case i >= r1Lo && i < r1Hi && sync == "flush":
			want = failX(i)
		}
		if got != want {
			failf("word %d of the target: %#x, want %#x (undefined: %v)", i, got, want, u.Exposed)
		}
	}
}

func int64s(b []byte) []int64  { return unsafe.Slice((*int64)(unsafe.Pointer(&b[0])), len(b)/8) }
func bytesOf(s []int64) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 8*len(s)) }

// coveredBy reports whether spans of rank r cover [lo, hi).
func coveredBy(spans []Span, r int, lo, hi uint64) bool {
	for _, s := range spans {
		if s.Rank == r && s.Off <= lo && hi <= s.Off+s.Len {
			return true
		}
	}
	return false
}

// dieWhenReady kills window rank v (world rank v) once every other rank
// has told it that it is ready; the others tell it.
func dieWhenReady(ctx context.Context, c *fabric.Comm, v int, alive []int) {
	if c.Rank() != v {
		must(c.Send(ctx, nil, v, 98), "ready")
		return
	}
	for _, r := range alive {
		if r != v {
			_, err := c.Recv(ctx, nil, r, 98)
			must(err, "ready")
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// awaitKnown waits until this process knows world rank v failed.
func awaitKnown(ctx context.Context, ep *fabric.Endpoint, v int) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for ep.Failure(v) == nil {
		ep.Poll()
		select {
		case <-ctx.Done():
			failf("rank %d's failure never known", v)
		case <-time.After(time.Millisecond):
		}
	}
}

// TestRevoke: one rank revokes the window during a passive epoch of the
// others; each of them sees ErrRevoked at a synchronization soon after,
// its operations become local errors, and both sides report the ranges
// in flight.
func TestRevoke(t *testing.T) {
	for _, p := range providers(t, []int{4}) {
		if p.name == "mixed" {
			continue
		}
		t.Run(p.name, func(t *testing.T) { runOK(t, 4, "revoke", p.env...) })
	}
}

func progRevoke(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	w, err := Allocate(ctx, c, 8*failWords, 8, Info{})
	must(err, "allocate")
	next := (me + 1) % n
	x := make([]int64, 8)
	must(w.LockAll(ctx, 0), "lock all")
	// Every rank has written once and flushed before rank 0 revokes.
	must(Put(ctx, w, x, next, me), "put")
	must(w.Flush(ctx, next), "flush")
	must(collectives.Barrier(ctx, c), "barrier")
	if me == 0 {
		must(w.Revoke(), "revoke")
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if err := Put(sctx, w, x, next, me); err != nil && !errors.Is(err, fabric.ErrRevoked) {
			failf("put: %v", err)
		}
		err := w.Flush(sctx, next)
		if errors.Is(err, fabric.ErrRevoked) {
			break
		}
		if err != nil {
			failf("flush: %v, want ErrRevoked in the end", err)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if !w.IsRevoked() {
		failf("IsRevoked false after ErrRevoked")
	}
	if err := Put(ctx, w, x, next, me); !errors.Is(err, fabric.ErrRevoked) {
		failf("put after the revoke: %v", err)
	}
	if err := w.UnlockAll(ctx); !errors.Is(err, fabric.ErrRevoked) {
		failf("unlock all after the revoke: %v", err)
	}
	if err := w.Lock(ctx, Shared, next, 0); !errors.Is(err, fabric.ErrRevoked) {
		failf("lock after the revoke: %v", err)
	}
	// The puts in flight when this process learned of the revoke (none
	// on shared memory, where a put is complete when it returns) are all
	// its Target may report; every origin's records stay at its target.
	u := w.Undefined()
	for _, s := range u.Target {
		if s.Rank != next || s.Off < uint64(8*me) || s.Off+s.Len > uint64(8*me+64) {
			failf("Undefined().Target %v: this process only wrote [%d, %d) of rank %d", u.Target, 8*me, 8*me+64, next)
		}
	}
	prev := (me + n - 1) % n
	if !coveredBy(u.Exposed, prev, uint64(8*prev), uint64(8*prev+64)) {
		failf("Undefined().Exposed %v: rank %d's records are not there", u.Exposed, prev)
	}
	if g := w.GetFailed(); g.Size() != 0 {
		failf("GetFailed: %v, nobody failed", g)
	}
	if err := w.Free(ctx); !errors.Is(err, fabric.ErrRevoked) {
		failf("free of a revoked window: %v", err)
	}
	return nil
}
