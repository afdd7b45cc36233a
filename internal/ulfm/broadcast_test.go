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

// TestNoticesReachEverySurvivor: failures learned while other processes
// are dead but not yet known — notices sent to them are lost — still
// reach every survivor. Each survivor learns the failed processes just
// below it itself, nearest first, as its detector convicts them; all
// else it learns from notices, delivered in a random order. (Before
// Notices sent what it knew to a new ±1 neighbour, some survivors never
// heard of some failures: internal/ftsim's seeds with several processes
// killed at once.)
func TestNoticesReachEverySurvivor(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 3000; trial++ {
		n := 2 + rng.IntN(40)
		dead := make([]bool, n)
		for w := range dead {
			dead[w] = rng.IntN(2) == 0
		}
		dead[rng.IntN(n)] = false
		type msg struct{ to, item int }
		var q []msg
		knows := make([][]bool, n)
		nt := make([]Notices, n)
		learn := func(p, w int) {
			if knows[p][w] {
				return
			}
			knows[p][w] = true
			nt[p].Spread(p, n, w, func(i int) bool { return knows[p][i] }, func(to, v int) {
				if !dead[to] {
					q = append(q, msg{to, v})
				}
			})
		}
		// The detectors' convictions, each survivor's in order, the
		// survivors' interleaved at random with the notices.
		next := make([]int, n)
		for p := range next {
			knows[p] = make([]bool, n)
			next[p] = (p + n - 1) % n
		}
		for {
			var ready []int
			for p := range n {
				if !dead[p] && dead[next[p]] {
					ready = append(ready, p)
				}
			}
			if len(ready) == 0 && len(q) == 0 {
				break
			}
			if len(q) > 0 && (len(ready) == 0 || rng.IntN(2) == 0) {
				i := rng.IntN(len(q))
				m := q[i]
				q = append(q[:i], q[i+1:]...)
				learn(m.to, m.item)
				continue
			}
			p := ready[rng.IntN(len(ready))]
			learn(p, next[p])
			next[p] = (next[p] + n - 1) % n
		}
		for p := range n {
			for w := range n {
				if !dead[p] && dead[w] && !knows[p][w] {
					t.Fatalf("trial %d, n=%d dead=%v: survivor %d never heard that %d failed", trial, n, dead, p, w)
				}
			}
		}
	}
}
