//go:build linux

package rma

import (
	"context"
	"os"
	"slices"
	"sync/atomic"
	"unsafe"
)

// Range records: which memory a failure made undefined (§16.2.5's advice
// to implementors, scoped to ranges).
//
// Before an origin first writes to a range of a target's memory in an
// epoch — a put or an accumulate — it records the range in the target's
// control memory, in the record block the target keeps for that origin
// (recSlots ranges). Over verbs the record goes on the same queue pair
// as the data and before it, and RC executes a queue pair's writes in
// order, so the target's memory never holds a byte of the data without
// the range that covers it; on shared memory the record is a store that
// precedes the copy. Records only grow until the epoch ends or a flush
// completes what they cover; a write inside a recorded range costs a
// comparison, so a loop that writes the same ranges again and again
// writes its records once. When the epoch ends — unlock, fence, complete
// — the origin clears its records at the target.
//
// A target that learns an origin failed reads the origin's block in its
// own memory: those ranges, and only those, may hold half-written data.
// The origin, for its part, knows which target ranges its failed
// synchronizations left undefined (the records it held for them) and
// which of its own buffers a get that did not complete may have
// half-written. Undefined reports both.
//
// Info.NoRangeRecords (or RIVET_RMA_RANGES=off) turns records off: a
// failure then makes the whole window memory of the processes involved
// undefined, as MPI's text without the advice says.
const (
	recSlots = 4
	recSize  = 16 * recSlots // per origin: recSlots × (lo, hi)
)

// recOff is where origin o's record block lies in a target's control
// memory, recScratch where this process keeps its block for target t in
// its scratch memory (the source of the RDMA write).
func recOff(n, o int) int     { return 8*freeWord(n, n) + o*recSize }
func recScratch(n, t int) int { return 8*scratchOf(n, freeWord(n, n)) + t*recSize }

// span is a range [lo, hi) of a target's memory: byte offsets in its
// window, or addresses in a dynamic window.
type span struct{ lo, hi uint64 }

// records is what this process has recorded at one target, and whether
// a flush has completed every write they cover since.
type records struct {
	s       [recSlots]span
	flushed bool
}

// covers reports whether [lo, hi) lies in one recorded range.
func (rc *records) covers(lo, hi uint64) bool {
	for _, s := range rc.s {
		if s.hi > s.lo && s.lo <= lo && hi <= s.hi {
			return true
		}
	}
	return false
}

// empty reports whether no range is recorded (a loop, not an array
// comparison, which is a call to memequal on every flush).
func (rc *records) empty() bool {
	for _, s := range rc.s {
		if s != (span{}) {
			return false
		}
	}
	return true
}

// add makes the records cover [lo, hi): after a flush they start again
// from it alone; otherwise the range goes to an empty slot, or extends
// the slot it is nearest to. A slot only grows, so every state of the
// block while it is being written covers what it covered before.
func (rc *records) add(lo, hi uint64) {
	if rc.flushed {
		rc.s, rc.flushed = [recSlots]span{}, false
	}
	best, gap := -1, ^uint64(0)
	for i, s := range rc.s {
		if s.hi <= s.lo {
			if best < 0 || gap != 0 {
				best, gap = i, 0 // an empty slot, unless one touches the range
			}
			continue
		}
		var g uint64
		switch {
		case hi < s.lo:
			g = s.lo - hi
		case lo > s.hi:
			g = lo - s.hi
		}
		if g < gap || g == 0 {
			best, gap = i, g
		}
	}
	s := &rc.s[best]
	if s.hi <= s.lo {
		*s = span{lo, hi}
		return
	}
	s.lo, s.hi = min(s.lo, lo), max(s.hi, hi)
}

// tracking is whether range records are on: Info.NoRangeRecords and the
// RIVET_RMA_RANGES=off switch turn them off.
func tracking(info Info) bool {
	return !info.NoRangeRecords && os.Getenv("RIVET_RMA_RANGES") != "off"
}

// record makes sure [off, off+n) of window rank r's memory (at
// displacement disp) is recorded before a write to it; with w.mu held. This process's copy of the
// records is kept with records off too: it is what Undefined reports
// as the targets a failed synchronization leaves undefined.
func (w *Window) record(ctx context.Context, r int, disp int, off uint64, n int) error {
	rc := &w.recs[r]
	lo := w.rangeAt(disp, off)
	hi := lo + uint64(n)
	if n == 0 || rc.covers(lo, hi) && !rc.flushed {
		return nil
	}
	if rc.covers(lo, hi) {
		// Recorded before the flush, and still at the target: the range
		// is covered there, and is in flight again from now on.
		rc.flushed = false
		return nil
	}
	rc.add(lo, hi)
	if !w.track {
		return nil
	}
	return w.writeRecords(ctx, &w.targets[r], r)
}

// writeRecords writes this process's record block for window rank r
// into r's control memory: stores when it is mapped here, else an RDMA
// write from the scratch memory, on the queue pair the data takes.
func (w *Window) writeRecords(ctx context.Context, t *target, r int) error {
	rc := &w.recs[r]
	off := uint64(w.recAt)
	if t.local {
		for i, s := range rc.s {
			atomic.StoreUint64(word(t.ctl, off+uint64(16*i)), s.lo)
			atomic.StoreUint64(word(t.ctl, off+uint64(16*i+8)), s.hi)
		}
		return nil
	}
	b := w.scratch[recScratch(w.n, r):][:recSize]
	for i, s := range rc.s {
		atomic.StoreUint64(word(b, uint64(16*i)), s.lo)
		atomic.StoreUint64(word(b, uint64(16*i+8)), s.hi)
	}
	w.targets[r].pending = true
	return w.ep.Put(ctx, t.nicRank, t.rcl, off, b)
}

// clearRecords ends window rank r's records once its epoch ended with
// every write complete; with w.mu held.
func (w *Window) clearRecords(ctx context.Context, r int) error {
	w.forgetGets(r)
	rc := &w.recs[r]
	if rc.empty() {
		return nil
	}
	*rc = records{}
	if !w.track {
		return nil
	}
	return w.writeRecords(ctx, &w.targets[r], r)
}

// flushed notes that a flush completed every operation to window rank
// r: its records may start again, and its gets are in place.
func (w *Window) flushed(r int) {
	if !w.recs[r].empty() {
		w.recs[r].flushed = true
	}
	w.forgetGets(r)
}

// forgetGets drops the gets from window rank r, complete now (a loop,
// not slices.DeleteFunc: a closure here would cost every flush an
// allocation).
func (w *Window) forgetGets(r int) {
	k := 0
	for _, g := range w.gets {
		if g.r != r {
			w.gets[k] = g
			k++
		}
	}
	w.gets = w.gets[:k]
}

// pendingGet is a get (or a result of the accumulate family) whose
// local buffer the NIC may still be writing.
type pendingGet struct {
	r    int
	addr uintptr
	n    int
}

// reading notes a get from window rank r into b, over the NIC; with
// w.mu held.
func (w *Window) reading(r int, b []byte) {
	if len(b) > 0 {
		w.gets = append(w.gets, pendingGet{r, uintptr(unsafe.Pointer(&b[0])), len(b)})
	}
}

// lost notes that the operations to window rank r did not complete:
// what they may have changed there, and the buffers their gets were
// writing here, are undefined. With w.mu held.
func (w *Window) lost(r int) {
	rc := &w.recs[r]
	if !rc.empty() && !rc.flushed {
		if w.track {
			for _, s := range rc.s {
				if s.hi > s.lo {
					w.und.Target = appendSpan(w.und.Target, Span{Rank: r, Off: s.lo, Len: s.hi - s.lo})
				}
			}
		} else {
			w.und.Target = appendSpan(w.und.Target, w.whole(r))
		}
	}
	*rc = records{}
	w.gets = slices.DeleteFunc(w.gets, func(g pendingGet) bool {
		if g.r == r {
			w.und.Local = appendSpan(w.und.Local, Span{Rank: r, Off: uint64(g.addr), Len: uint64(g.n)})
		}
		return g.r == r
	})
}

// lostResult notes that an accumulate-family call to window rank r
// failed part way: its result buffer b is undefined here, and, if it
// writes, [off, off+n) of r's memory there.
func (w *Window) lostResult(r int, off uint64, n int, writes bool, b []byte) {
	if writes {
		w.und.Target = appendSpan(w.und.Target, Span{Rank: r, Off: off, Len: uint64(n)})
	}
	if len(b) > 0 {
		w.und.Local = appendSpan(w.und.Local, Span{Rank: r, Off: uint64(uintptr(unsafe.Pointer(&b[0]))), Len: uint64(len(b))})
	}
}

// rangeAt is where an operation at displacement disp (byte offset off)
// starts, as records and Undefined name it: off, or in a dynamic
// window the address.
func (w *Window) rangeAt(disp int, off uint64) uint64 {
	if w.flavor == FlavorDynamic {
		return uint64(disp)
	}
	return off
}

// whole is all of window rank r's memory, what a failure makes undefined
// without range records: a dynamic window's is every address.
func (w *Window) whole(r int) Span {
	if w.flavor == FlavorDynamic {
		return Span{Rank: r, Len: ^uint64(0)}
	}
	return Span{Rank: r, Len: w.targets[r].size}
}

func appendSpan(s []Span, x Span) []Span {
	if x.Len == 0 || slices.Contains(s, x) {
		return s
	}
	return append(s, x)
}

// Span is a range of memory a failure made undefined.
type Span struct {
	// Rank is a window rank: in Undefined.Exposed the origin whose
	// operations may have written the range, in Target the process whose
	// memory it is, in Local the target the get read from.
	Rank int
	// Off is where the range starts: a byte offset into the window
	// memory of its owner (an address in a dynamic window), or for Local
	// the address of this process's buffer.
	Off uint64
	// Len is the range's length in bytes.
	Len uint64
}

// Undefined is which memory failures have made undefined, as this
// process knows it (Window.Undefined).
type Undefined struct {
	// Exposed: ranges of this process's window memory that an origin
	// which failed — or any origin, once the window is revoked — may
	// have been writing (a put or accumulate whose epoch had not ended).
	Exposed []Span
	// Target: ranges of other processes' window memory that this
	// process's own puts and accumulates may have left half-written,
	// because the synchronization that would have completed them failed
	// (or the window was revoked).
	Target []Span
	// Local: this process's buffers (Off is the address) that a get or
	// an accumulate's result may have left half-written.
	Local []Span
}

// Undefined reports which memory failures have made undefined so far
// (§16.2.5): the implementation-specific attribute the chapter invites,
// scoped to ranges. Memory outside the reported ranges keeps its value.
// It is local. Ranges are reported at least as wide as what was written
// (never narrower): a range stays recorded from the first write to it
// until the epoch ends; a flush does not clear it — the records stay
// until the next write after the flush that falls outside them, which
// starts them again from that write alone. With range records off
// (Info.NoRangeRecords, RIVET_RMA_RANGES=off) every range is a whole
// window (a dynamic window's: every address, Len 2⁶⁴−1, in Target; its
// attached regions in Exposed), and Exposed names every failed origin,
// whether it wrote or not.
func (w *Window) Undefined() Undefined {
	w.mu.Lock()
	defer w.mu.Unlock()
	u := Undefined{
		Target: slices.Clone(w.und.Target),
		Local:  slices.Clone(w.und.Local),
	}
	if w.ctl == nil {
		return u
	}
	revoked := w.revokedHere()
	for o := range w.n {
		if o == w.me || !revoked && w.failed(o) == nil {
			continue
		}
		if !w.track {
			if w.flavor == FlavorDynamic {
				for _, d := range w.dyn.mine {
					u.Exposed = appendSpan(u.Exposed, Span{Rank: o, Off: d.addr, Len: d.len})
				}
			} else {
				u.Exposed = appendSpan(u.Exposed, Span{Rank: o, Len: uint64(len(w.base))})
			}
			continue
		}
		off := uint64(recOff(w.n, o))
		for i := range recSlots {
			lo := atomic.LoadUint64(word(w.ctl, off+uint64(16*i)))
			hi := atomic.LoadUint64(word(w.ctl, off+uint64(16*i+8)))
			if hi > lo {
				u.Exposed = appendSpan(u.Exposed, Span{Rank: o, Off: lo, Len: hi - lo})
			}
		}
	}
	return u
}
