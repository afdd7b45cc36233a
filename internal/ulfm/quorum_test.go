package ulfm

import "testing"

func TestQuorum(t *testing.T) {
	// Six ranks on three nodes: 0,1 on node 0; 2,3 on node 1; 4,5 on 2.
	three := []int{0, 0, 1, 1, 2, 2}
	two := []int{0, 0, 1, 1}
	for _, tc := range []struct {
		name   string
		nodeOf []int
		me     int
		failed []int
		seen   int
		ok     bool
	}{
		{"nothing failed", three, 4, nil, 3, true},
		{"one rank of a node", three, 0, []int{4}, 3, true},
		{"a whole node", three, 0, []int{4, 5}, 2, true},
		{"cut off: the other two nodes", three, 4, []int{0, 1, 2, 3}, 1, false},
		{"two nodes, one rank of each left", three, 0, []int{2, 4, 5, 3}, 1, false},
		{"its own failure is not its view", three, 4, []int{4, 5, 0, 1}, 2, true},
		{"two nodes: the other one lost", two, 0, []int{2, 3}, 1, true},
		{"two nodes: rank 0's lost", two, 2, []int{0, 1}, 1, false},
		{"one node", []int{0, 0, 0}, 1, []int{0, 2}, 1, true},
	} {
		f := map[int]bool{}
		for _, w := range tc.failed {
			f[w] = true
		}
		seen, nodes, ok := Quorum(tc.nodeOf, tc.me, func(w int) bool { return f[w] })
		want := tc.nodeOf[len(tc.nodeOf)-1] + 1
		if seen != tc.seen || ok != tc.ok || nodes != want {
			t.Errorf("%s: seen %d of %d, ok %v; want %d of %d, %v", tc.name, seen, nodes, ok, tc.seen, want, tc.ok)
		}
	}
}
