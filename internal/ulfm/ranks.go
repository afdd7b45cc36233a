package ulfm

import (
	"math/bits"
	"slices"
)

// The machines keep sets of ranks in two forms: a bitset where every
// rank of the communicator may be asked about (who is known failed), and
// a sorted list where a set is usually small (the failures an agreement
// carries, the contributions it gathered), so that a process of a job of
// 65,536 holds a few words per agreement, not a flag per process.

// bitset is a set of ranks 0 to n-1.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) has(r int) bool { return b[r/64]&(1<<(r%64)) != 0 }

func (b bitset) set(r int) { b[r/64] |= 1 << (r % 64) }

// firstClear is the lowest rank below n not in b, or -1.
func (b bitset) firstClear(n int) int {
	for i, w := range b {
		if w != ^uint64(0) {
			if r := i*64 + bits.TrailingZeros64(^w); r < n {
				return r
			}
			return -1
		}
	}
	return -1
}

// rankSet is a set of ranks as a sorted list.
type rankSet []int32

func (s rankSet) has(r int) bool {
	_, ok := slices.BinarySearch(s, int32(r))
	return ok
}

// add puts r in s.
func (s *rankSet) add(r int) {
	if i, ok := slices.BinarySearch(*s, int32(r)); !ok {
		*s = slices.Insert(*s, i, int32(r))
	}
}

// union puts every rank of t in s, merging: O(len(s)+len(t)).
func (s *rankSet) union(t rankSet) {
	if len(t) == 0 {
		return
	}
	a := *s
	out := make(rankSet, 0, len(a)+len(t))
	i, j := 0, 0
	for i < len(a) || j < len(t) {
		switch {
		case j == len(t) || i < len(a) && a[i] < t[j]:
			out = append(out, a[i])
			i++
		case i == len(a) || t[j] < a[i]:
			out = append(out, t[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	*s = out
}

// ints is s as ints.
func (s rankSet) ints() []int {
	out := make([]int, len(s))
	for i, r := range s {
		out[i] = int(r)
	}
	return out
}
