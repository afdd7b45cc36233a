//go:build linux

package fabric

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rivet-hpc/rivet/internal/launch"
)

func TestNodeMapEncoding(t *testing.T) {
	for _, of := range [][]int{
		{0},
		{0, 0, 0, 0, 1, 1, 1, 1}, // by block
		{0, 1, 2, 0, 1, 2, 0},    // round robin
		{0, 0, 1, 0, 2, 2},
	} {
		m := &nodeMap{of: of}
		for k := range slices.Max(of) + 1 {
			m.ids = append(m.ids, nodeID(strings.Repeat("n", k+1)))
		}
		got, err := decodeNodeMap(m.encode(), len(of))
		if err != nil || !slices.Equal(got.of, of) || !slices.Equal(got.ids, m.ids) {
			t.Errorf("%v: encoded %q, decoded %+v, %v", of, m.encode(), got, err)
		}
	}
	if got := string((&nodeMap{ids: []string{"a", "b"}, of: []int{0, 0, 1, 0}}).encode()); got != "a,b;0*2,1*1,0*1" {
		t.Errorf("encoded %q", got)
	}
	for _, bad := range []string{"", ";", "a;", ";0*1", "a;0*0", "a;1*1", "a;0*3", "a;0*1,0*", "a;-1*1", "a;0*1x", "a,b;0*1"} {
		if m, err := decodeNodeMap([]byte(bad), 2); err == nil {
			t.Errorf("%q decoded as %+v", bad, m)
		}
	}
}

func init() {
	progs.Add("nodes", func(ctx context.Context, ep *Endpoint) error {
		for w := range ep.World().Size() {
			if ep.Node(w) != 0 {
				failf("rank %d on node %d", w, ep.Node(w))
			}
		}
		return nil
	})
}

// TestInitLookups: Init makes a number of lookups at the launcher that
// grows with the ranks, not with their square (every rank reading every
// rank's node key made 2N per rank).
func TestInitLookups(t *testing.T) {
	for _, n := range []int{4, 16} {
		var gets atomic.Int64
		out, errs, st := progs.RunWith(t, launch.Options{N: n, Lookups: &gets}, "nodes")
		if st != 0 || strings.Count(out, " ok") != n {
			t.Fatalf("%d ranks: status %d\n%s\n%s", n, st, out, errs)
		}
		t.Logf("%d ranks: %d lookups", n, gets.Load())
		if got := gets.Load(); got > 10*int64(n) {
			t.Errorf("%d ranks made %d lookups: more than 10 a rank", n, got)
		}
	}
}
