//go:build linux

package rma

import (
	"context"
	"sync/atomic"
)

// The accumulate family on words. Every accumulate, of any op, type and
// length, becomes compare-and-swaps of the aligned 8-byte words that
// hold its elements (elements are 1, 2, 4 or 8 bytes and aligned, so
// none straddles two words): read a word (or guess it), apply the op to
// the elements of the word that the operation covers, and swap the
// result in if the word still holds what was read; otherwise start again
// from what the swap found. Every accumulate-family call on a window
// goes through the same kind of atomic (CPU or NIC, the window's domain)
// on the same words, so they are atomic per element with respect to each
// other, whatever their ops and sizes. On the NIC the first guess is the
// value this process last saw in the word (casCache): when the word has
// not changed since, the update is one round trip, with no read.

// casBatch is how many word swaps go to the NIC before one flush.
const casBatch = 256

// rmw applies apply to every element in [off, off+n) of t's memory
// atomically per word; apply gets a word's covered bytes (as a copy to
// change in place) and their position in the operation. If out is not
// nil it receives the bytes the successful swaps replaced.
func (w *Window) rmw(ctx context.Context, t *target, off uint64, n int, apply func(seg []byte, at int), out []byte) error {
	lo, hi := off&^7, (off+uint64(n)+7)&^7
	if !w.nic {
		buf := w.wbuf[:]
		for a := lo; a < hi; a += 8 {
			p := word(t.data, a)
			s, e := max(a, off), min(a+8, off+uint64(n))
			for {
				old := atomic.LoadUint64(p)
				ne.PutUint64(buf, old)
				if out != nil {
					copy(out[s-off:e-off], buf[s-a:e-a])
				}
				apply(buf[s-a:e-a], int(s-off))
				if nw := ne.Uint64(buf); nw == old || atomic.CompareAndSwapUint64(p, old, nw) {
					break
				}
			}
		}
		return nil
	}
	for b := lo; b < hi; b += 8 * casBatch {
		if err := w.rmwBatch(ctx, t, b, min(hi, b+8*casBatch), off, n, apply, out); err != nil {
			return err
		}
	}
	return nil
}

// rmwBatch is rmw over the words in [lo, hi) on the NIC: every swap is
// issued before one flush, and only the words whose swap failed go
// again.
func (w *Window) rmwBatch(ctx context.Context, t *target, lo, hi, off uint64, n int, apply func(seg []byte, at int), out []byte) error {
	nw := int(hi-lo) / 8
	w.res = grow(w.res, nw)
	w.guess = grow(w.guess, nw)
	w.pend = w.pend[:0]
	for i := range nw {
		w.guess[i] = w.cas.get(t.world, lo+uint64(8*i))
		w.pend = append(w.pend, i)
	}
	buf := w.wbuf[:]
	for len(w.pend) > 0 {
		for _, i := range w.pend {
			a := lo + uint64(8*i)
			s, e := max(a, off), min(a+8, off+uint64(n))
			ne.PutUint64(buf, w.guess[i])
			apply(buf[s-a:e-a], int(s-off))
			if err := w.ep.CompareAndSwap(ctx, t.nicRank, t.rdata, a, w.guess[i], ne.Uint64(buf), &w.res[i]); err != nil {
				return err
			}
		}
		if err := w.ep.Flush(ctx, t.nicRank); err != nil {
			return err
		}
		left := w.pend[:0]
		for _, i := range w.pend {
			a := lo + uint64(8*i)
			if w.res[i] != w.guess[i] {
				w.guess[i] = w.res[i]
				w.cas.put(t.world, a, w.res[i])
				left = append(left, i)
				continue
			}
			s, e := max(a, off), min(a+8, off+uint64(n))
			ne.PutUint64(buf, w.guess[i])
			if out != nil {
				copy(out[s-off:e-off], buf[s-a:e-a])
			}
			apply(buf[s-a:e-a], int(s-off))
			w.cas.put(t.world, a, ne.Uint64(buf))
		}
		w.pend = left
	}
	return nil
}

// faddElems adds 8-byte integers with the NIC's fetch-and-add, one per
// element, all issued before one flush; out, if not nil, receives the
// previous values.
func (w *Window) faddElems(ctx context.Context, t *target, off uint64, in, out []byte) error {
	n := len(in) / 8
	if n == 1 {
		// One element (FetchAndOp, the commonest): no batch to keep.
		add := ne.Uint64(in)
		if err := w.ep.FetchAndAdd(ctx, t.nicRank, t.rdata, off, add, &w.res1); err != nil {
			return err
		}
		if err := w.ep.Flush(ctx, t.nicRank); err != nil {
			return err
		}
		if out != nil {
			ne.PutUint64(out, w.res1)
		}
		w.cas.put(t.world, off, w.res1+add)
		return nil
	}
	for b := 0; b < n; b += casBatch {
		m := min(n-b, casBatch)
		w.res = grow(w.res, m)
		for i := range m {
			if err := w.ep.FetchAndAdd(ctx, t.nicRank, t.rdata, off+uint64(8*(b+i)), ne.Uint64(in[8*(b+i):]), &w.res[i]); err != nil {
				return err
			}
		}
		if err := w.ep.Flush(ctx, t.nicRank); err != nil {
			return err
		}
		for i := range m {
			if out != nil {
				ne.PutUint64(out[8*(b+i):], w.res[i])
			}
			w.cas.put(t.world, off+uint64(8*(b+i)), w.res[i]+ne.Uint64(in[8*(b+i):]))
		}
	}
	return nil
}

// casCache remembers the last value this process saw in recently used
// words, the first guess of a NIC compare-and-swap. A wrong guess costs
// one more round trip, never correctness.
type casCache struct {
	keys [64]uint64
	vals [64]uint64
}

func (c *casCache) slot(rank int, addr uint64) (int, uint64) {
	k := uint64(rank)<<48 ^ addr + 1
	return int((k>>3 ^ k>>9) % 64), k
}

func (c *casCache) get(rank int, addr uint64) uint64 {
	i, k := c.slot(rank, addr)
	if c.keys[i] == k {
		return c.vals[i]
	}
	return 0
}

func (c *casCache) put(rank int, addr, v uint64) {
	i, k := c.slot(rank, addr)
	c.keys[i], c.vals[i] = k, v
}
