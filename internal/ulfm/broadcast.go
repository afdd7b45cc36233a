package ulfm

// The broadcast of notices: what one process learns — a failure, from
// any source, or a communicator's revoke — every other learns from it:
// the process sends a notice to its neighbours in a binomial graph over
// the ranks (those at distances ±1, ±2, ±4, … up to half of them), and
// each process that learns from a notice sends it on to its own
// neighbours, once. With ⌈log2 n⌉ hops from
// any process to any other, and about 2·log2 n edges into each, it reaches
// every survivor even when processes — the first sender included — die
// while it spreads: the distance-1 edges skip processes known failed, so
// each process always has a live neighbour on either side.

// Neighbours appends to out the ranks process me of n sends a notice
// to: me±2^k for 2^k ≤ n/2, where ±1 step past processes known failed
// (failed reports which) to the nearest that is not. Each rank once.
func Neighbours(me, n int, failed func(int) bool, out []int) []int {
	start := len(out)
	add := func(w int) {
		if w == me || failed(w) {
			return
		}
		for _, x := range out[start:] {
			if x == w {
				return
			}
		}
		out = append(out, w)
	}
	for d := 1; d <= n/2; d *= 2 {
		for _, dir := range []int{1, -1} {
			w := ((me+dir*d)%n + n) % n
			if d == 1 {
				for k := 1; k < n && failed(w); k++ {
					w = ((w+dir)%n + n) % n
				}
			}
			add(w)
		}
	}
	return out
}

// Notices is one process's part in the broadcast of failure notices: it
// sends each failure it learns to its neighbours, once, and — because a
// notice sent before a neighbour's failure was known may have gone to
// that dead neighbour — it sends every failure it knows to a ±1
// neighbour it has not had before. Without that, a process whose ±1
// neighbours failed at the moment it spread a notice is the last to hear
// of it from this side, and may never (internal/ftsim found it: seeds
// with several processes killed at once). With it, the survivors' ring
// carries every failure both ways: each survivor's observer convicts the
// failed processes just below it, moves its ±1 edge past them, and tells
// the survivor there everything it knows.
//
// The zero Notices is ready; its driver calls Spread for each failure it
// learns, once. The same machine carries a revoke: Spread once, then
// Recheck at each failure learned.
type Notices struct {
	known  []int // the failures spread, as the driver names them
	lo, hi int   // the ±1 neighbours at the last Spread, plus one (0: none yet)
	buf    []int
}

// Spread tells the neighbours of process me of n (indices, with the
// failed ones as failed reports, item among them) that item failed, and
// any new ±1 neighbour every failure spread before, by calling send with
// a neighbour's index and a failure.
func (b *Notices) Spread(me, n, item int, failed func(int) bool, send func(dest, item int)) {
	b.buf = Neighbours(me, n, failed, b.buf[:0])
	for _, t := range b.buf {
		send(t, item)
	}
	b.Recheck(me, n, failed, send)
	b.known = append(b.known, item)
}

// Recheck sends everything spread so far to a ±1 neighbour that is new
// since the last Spread or Recheck: one that a failure learned since
// made this process's nearest live neighbour on a side. A broadcast of
// other news than failures (a revoke) calls it when the driver learns a
// failure.
func (b *Notices) Recheck(me, n int, failed func(int) bool, send func(dest, item int)) {
	lo, hi := b.ring(me, n, -1, failed), b.ring(me, n, 1, failed)
	for _, t := range [2]int{lo, hi} {
		if t < 0 || t+1 == b.lo || t+1 == b.hi {
			continue
		}
		for _, v := range b.known { // (none at the first Spread)
			send(t, v)
		}
	}
	b.lo, b.hi = lo+1, hi+1
}

// ring is the nearest process from me in direction dir not known failed,
// or -1.
func (b *Notices) ring(me, n, dir int, failed func(int) bool) int {
	for k, w := 1, me; k < n; k++ {
		w = ((w+dir)%n + n) % n
		if !failed(w) {
			return w
		}
	}
	return -1
}
