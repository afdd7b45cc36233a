//go:build linux

package launch

import (
	"fmt"
	"testing"
)

// TestCourt: a rank is condemned by a majority of the other live ranks;
// a rank cut off from the others, declaring each of them, condemns
// nobody.
func TestCourt(t *testing.T) {
	type step struct {
		by, r int // a declaration, or by == -1: rank r exited
		want  []int
	}
	for _, tc := range []struct {
		name  string
		n     int
		steps []step
	}{
		{"hung rank, 4", 4, []step{{3, 2, nil}, {0, 2, []int{2}}, {1, 2, nil}}},
		{"hung rank, 2", 2, []step{{0, 1, []int{1}}}},
		{"partition: the cut-off rank speaks first", 4, []step{
			{2, 1, nil}, {2, 0, nil}, {2, 3, nil}, {3, 2, nil}, {0, 2, []int{2}}, {1, 2, nil}}},
		{"two declare each other", 2, []step{{1, 0, []int{0}}, {0, 1, nil}}},
		{"an exit shrinks the majority", 4, []step{{0, 3, nil}, {-1, 1, nil}, {-1, 2, []int{3}}}},
		{"self and out of range ignored", 3, []step{{1, 1, nil}, {1, 7, nil}, {9, 1, nil}}},
		{"a condemned rank's votes stop counting", 5, []step{
			{4, 0, nil}, {1, 4, nil}, {2, 4, nil}, {3, 4, []int{4}}, {3, 0, nil}, {2, 0, []int{0}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCourt(tc.n)
			for i, s := range tc.steps {
				var got []int
				if s.by == -1 {
					got = c.exit(s.r)
				} else {
					got = c.declare(s.by, s.r)
				}
				if fmt.Sprint(got) != fmt.Sprint(s.want) {
					t.Fatalf("step %d %+v: condemned %v, want %v", i, s, got, s.want)
				}
			}
		})
	}
}
