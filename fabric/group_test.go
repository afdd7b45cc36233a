//go:build linux

package fabric

import (
	"errors"
	"slices"
	"testing"
)

func mustGroup(t *testing.T, ranks ...int) Group {
	t.Helper()
	g, err := NewGroup(ranks)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The examples follow the MPI standard's definitions (section "Group
// Constructors"): order comes from the first argument, then the second.
func TestGroupSetOperations(t *testing.T) {
	world := WorldGroup(8)
	a := mustGroup(t, 5, 1, 3, 7)
	b := mustGroup(t, 2, 3, 5, 6)
	for name, c := range map[string]struct{ got, want []int }{
		"union":        {Union(a, b).Members(), []int{5, 1, 3, 7, 2, 6}},
		"union rev":    {Union(b, a).Members(), []int{2, 3, 5, 6, 1, 7}},
		"intersection": {Intersection(a, b).Members(), []int{5, 3}},
		"difference":   {Difference(a, b).Members(), []int{1, 7}},
		"empty":        {Difference(a, a).Members(), nil},
		"world ∩ a":    {Intersection(world, a).Members(), []int{1, 3, 5, 7}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	if a.RankOf(3) != 2 || a.RankOf(4) != Undefined {
		t.Errorf("RankOf: %d %d", a.RankOf(3), a.RankOf(4))
	}
}

func TestGroupInclExcl(t *testing.T) {
	world := WorldGroup(10)
	g, err := world.Incl([]int{9, 0, 4})
	if err != nil || !slices.Equal(g.Members(), []int{9, 0, 4}) {
		t.Fatalf("Incl = %v, %v", g.Members(), err)
	}
	h, err := g.Excl([]int{1})
	if err != nil || !slices.Equal(h.Members(), []int{9, 4}) {
		t.Errorf("Excl = %v, %v", h.Members(), err)
	}
	r, err := world.RangeIncl([]Range{{1, 7, 3}, {9, 8, -1}})
	if err != nil || !slices.Equal(r.Members(), []int{1, 4, 7, 9, 8}) {
		t.Errorf("RangeIncl = %v, %v", r.Members(), err)
	}
	x, err := world.RangeExcl([]Range{{0, 8, 2}})
	if err != nil || !slices.Equal(x.Members(), []int{1, 3, 5, 7, 9}) {
		t.Errorf("RangeExcl = %v, %v", x.Members(), err)
	}
	for name, err := range map[string]error{
		"incl out of range":     func() error { _, err := world.Incl([]int{10}); return err }(),
		"incl negative":         func() error { _, err := world.Incl([]int{-1}); return err }(),
		"incl duplicate":        func() error { _, err := world.Incl([]int{2, 2}); return err }(),
		"excl duplicate":        func() error { _, err := world.Excl([]int{2, 2}); return err }(),
		"range zero stride":     func() error { _, err := world.RangeIncl([]Range{{0, 4, 0}}); return err }(),
		"range wrong direction": func() error { _, err := world.RangeIncl([]Range{{4, 0, 1}}); return err }(),
		"ranges overlap":        func() error { _, err := world.RangeIncl([]Range{{0, 4, 2}, {4, 6, 1}}); return err }(),
		"range past end":        func() error { _, err := world.RangeIncl([]Range{{8, 12, 1}}); return err }(),
		"new with duplicate":    func() error { _, err := NewGroup([]int{1, 1}); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestTranslateAndCompare(t *testing.T) {
	world := WorldGroup(6)
	g := mustGroup(t, 4, 2, 0)
	tr, err := TranslateRanks(g, []int{0, 1, 2}, world)
	if err != nil || !slices.Equal(tr, []int{4, 2, 0}) {
		t.Errorf("to world: %v, %v", tr, err)
	}
	tr, _ = TranslateRanks(world, []int{0, 1, 2, 3, 4}, g)
	if !slices.Equal(tr, []int{2, Undefined, 1, Undefined, 0}) {
		t.Errorf("from world: %v", tr)
	}
	if _, err := TranslateRanks(g, []int{3}, world); !errors.Is(err, ErrInvalid) {
		t.Errorf("rank outside g: %v", err)
	}
	for _, c := range []struct {
		g, h Group
		want Comparison
	}{
		{g, mustGroup(t, 4, 2, 0), Ident},
		{g, mustGroup(t, 0, 2, 4), Similar},
		{g, mustGroup(t, 4, 2, 1), Unequal},
		{g, mustGroup(t, 4, 2), Unequal},
		{WorldGroup(0), mustGroup(t), Ident},
	} {
		if got := Compare(c.g, c.h); got != c.want {
			t.Errorf("Compare(%v, %v) = %v, want %v", c.g.Members(), c.h.Members(), got, c.want)
		}
	}
	if w, err := g.WorldRank(1); err != nil || w != 2 {
		t.Errorf("WorldRank(1) = %d, %v", w, err)
	}
	m := g.Members()
	m[0] = 99
	if w, _ := g.WorldRank(0); w != 4 {
		t.Error("Members exposed the group's storage")
	}
}
