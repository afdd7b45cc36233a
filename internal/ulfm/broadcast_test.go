package ulfm

import (
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestNeighbours: from any process, a notice reaches every other in at
// most ⌈log2 n⌉ hops; with any set of processes known failed (to every
// sender), it still reaches every survivor.
func TestNeighbours(t *testing.T) {
	hops := func(src, n int, failed []bool) []int {
		d := make([]int, n)
		for i := range d {
			d[i] = -1
		}
		d[src] = 0
		q := []int{src}
		for len(q) > 0 {
			u := q[0]
			q = q[1:]
			for _, v := range Neighbours(u, n, func(r int) bool { return failed[r] }, nil) {
				if d[v] < 0 {
					d[v] = d[u] + 1
					q = append(q, v)
				}
			}
		}
		return d
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 64; n++ {
		bound := bits.Len(uint(n - 1)) // ⌈log2 n⌉
		none := make([]bool, n)
		for src := 0; src < n; src++ {
			for w, h := range hops(src, n, none) {
				if h < 0 || h > bound {
					t.Fatalf("n=%d: from %d, %d is %d hops away (bound %d)", n, src, w, h, bound)
				}
			}
		}
		for trial := 0; trial < 20; trial++ {
			failed := make([]bool, n)
			for w := range failed {
				failed[w] = rng.IntN(3) == 0
			}
			src := rng.IntN(n)
			failed[src] = false
			for w, h := range hops(src, n, failed) {
				if !failed[w] && h < 0 {
					t.Fatalf("n=%d failed=%v: from %d, survivor %d is never reached", n, failed, src, w)
				}
				if failed[w] && h >= 0 {
					t.Fatalf("n=%d: a notice went to %d, known failed", n, w)
				}
			}
		}
	}
}
