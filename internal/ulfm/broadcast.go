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
