//go:build linux

package fabric

import (
	"fmt"
)

// Undefined is the rank a process has in a group it is not in
// (MPI_UNDEFINED), and what TranslateRanks returns for such a process.
const Undefined = -32766

// Group is an ordered set of processes (MPI_Group), each named by its rank
// in the job's world. Groups are immutable values: every operation returns
// a new one, as in MPI.
type Group struct {
	members []int       // world ranks, in group-rank order
	index   map[int]int // world rank -> group rank
}

// NewGroup is the group of the given world ranks, in that order; they must
// be distinct and non-negative.
func NewGroup(worldRanks []int) (Group, error) {
	g := Group{members: append([]int(nil), worldRanks...), index: make(map[int]int, len(worldRanks))}
	for i, w := range worldRanks {
		if w < 0 {
			return Group{}, fmt.Errorf("fabric: group: world rank %d: %w", w, ErrInvalid)
		}
		if _, dup := g.index[w]; dup {
			return Group{}, fmt.Errorf("fabric: group: world rank %d appears twice: %w", w, ErrInvalid)
		}
		g.index[w] = i
	}
	return g, nil
}

// WorldGroup is the group of a job of size processes: 0 … size-1.
func WorldGroup(size int) Group {
	m := make([]int, size)
	for i := range m {
		m[i] = i
	}
	g, _ := NewGroup(m)
	return g
}

// Size is the number of processes in the group.
func (g Group) Size() int { return len(g.members) }

// RankOf returns the group rank of the process with the given world rank,
// or Undefined.
func (g Group) RankOf(worldRank int) int {
	if r, ok := g.index[worldRank]; ok {
		return r
	}
	return Undefined
}

// WorldRank returns the world rank of group rank r.
func (g Group) WorldRank(r int) (int, error) {
	if err := g.check(r); err != nil {
		return 0, err
	}
	return g.members[r], nil
}

// Members returns the world ranks in group order.
func (g Group) Members() []int { return append([]int(nil), g.members...) }

func (g Group) check(r int) error {
	if r < 0 || r >= len(g.members) {
		return fmt.Errorf("fabric: rank %d is not in a group of %d: %w", r, len(g.members), ErrInvalid)
	}
	return nil
}

// Incl is the group of g's processes at ranks, in that order
// (MPI_Group_incl). The ranks must be distinct ranks of g.
func (g Group) Incl(ranks []int) (Group, error) {
	out := make([]int, 0, len(ranks))
	for _, r := range ranks {
		if err := g.check(r); err != nil {
			return Group{}, err
		}
		out = append(out, g.members[r])
	}
	return NewGroup(out)
}

// Excl is g without the processes at ranks, in g's order (MPI_Group_excl).
// The ranks must be distinct ranks of g.
func (g Group) Excl(ranks []int) (Group, error) {
	drop := make(map[int]bool, len(ranks))
	for _, r := range ranks {
		if err := g.check(r); err != nil {
			return Group{}, err
		}
		if drop[r] {
			return Group{}, fmt.Errorf("fabric: rank %d excluded twice: %w", r, ErrInvalid)
		}
		drop[r] = true
	}
	var out []int
	for r, w := range g.members {
		if !drop[r] {
			out = append(out, w)
		}
	}
	return NewGroup(out)
}

// Range is a triplet of ranks first, first+stride, … up to last
// (inclusive), as in MPI_Group_range_incl. Stride may be negative, not 0.
type Range struct{ First, Last, Stride int }

func (g Group) expand(ranges []Range) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, rg := range ranges {
		if rg.Stride == 0 || (rg.Last-rg.First)*rg.Stride < 0 {
			return nil, fmt.Errorf("fabric: range %+v: %w", rg, ErrInvalid)
		}
		for r := rg.First; (rg.Stride > 0 && r <= rg.Last) || (rg.Stride < 0 && r >= rg.Last); r += rg.Stride {
			if err := g.check(r); err != nil {
				return nil, err
			}
			if seen[r] {
				return nil, fmt.Errorf("fabric: rank %d named twice by ranges: %w", r, ErrInvalid)
			}
			seen[r] = true
			out = append(out, r)
		}
	}
	return out, nil
}

// RangeIncl is Incl of the ranks the ranges name, in order
// (MPI_Group_range_incl).
func (g Group) RangeIncl(ranges []Range) (Group, error) {
	ranks, err := g.expand(ranges)
	if err != nil {
		return Group{}, err
	}
	return g.Incl(ranks)
}

// RangeExcl is Excl of the ranks the ranges name (MPI_Group_range_excl).
func (g Group) RangeExcl(ranges []Range) (Group, error) {
	ranks, err := g.expand(ranges)
	if err != nil {
		return Group{}, err
	}
	return g.Excl(ranks)
}

// Union is g's processes in g's order, then h's that are not in g, in h's
// order (MPI_Group_union).
func Union(g, h Group) Group {
	out := g.Members()
	for _, w := range h.members {
		if _, in := g.index[w]; !in {
			out = append(out, w)
		}
	}
	u, _ := NewGroup(out)
	return u
}

// Intersection is g's processes that are also in h, in g's order
// (MPI_Group_intersection).
func Intersection(g, h Group) Group { return g.filter(h, true) }

// Difference is g's processes that are not in h, in g's order
// (MPI_Group_difference).
func Difference(g, h Group) Group { return g.filter(h, false) }

func (g Group) filter(h Group, keep bool) Group {
	var out []int
	for _, w := range g.members {
		if _, in := h.index[w]; in == keep {
			out = append(out, w)
		}
	}
	f, _ := NewGroup(out)
	return f
}

// TranslateRanks maps ranks of g to the ranks of the same processes in h,
// Undefined for those not in h (MPI_Group_translate_ranks).
func TranslateRanks(g Group, ranks []int, h Group) ([]int, error) {
	out := make([]int, len(ranks))
	for i, r := range ranks {
		if err := g.check(r); err != nil {
			return nil, err
		}
		out[i] = h.RankOf(g.members[r])
	}
	return out, nil
}

// Comparison is the result of Compare.
type Comparison int

// Group comparisons, as MPI_Group_compare reports them.
const (
	Ident   Comparison = iota // same processes, same order
	Similar                   // same processes, another order
	Unequal
)

func (c Comparison) String() string {
	return [...]string{"IDENT", "SIMILAR", "UNEQUAL"}[c]
}

// Compare tells whether g and h hold the same processes, in the same order.
func Compare(g, h Group) Comparison {
	if g.Size() != h.Size() {
		return Unequal
	}
	same := true
	for i, w := range g.members {
		if _, in := h.index[w]; !in {
			return Unequal
		}
		if h.members[i] != w {
			same = false
		}
	}
	if same {
		return Ident
	}
	return Similar
}
