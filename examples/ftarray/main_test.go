//go:build linux

package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func TestMain(m *testing.M) { jobtest.ExampleMain(m, run) }

// TestArray: 4 ranks, 64 elements. Rank 2 dies after summing its terms
// into rank 3's block, before the others: rank 3 repairs exactly those 16
// elements, which Undefined reports, and keeps the rest; the survivors
// spread the 64 elements over 3 (22, 22, 20), and the new owners of rank
// 2's lost block (world ranks 1 and 3) recompute it. Every element is
// checked against the sum over the survivors. Rank 2 dies before the
// window exists: Allocate raises at every survivor (its creation is
// uniform), and each recomputes its whole block.
func TestArray(t *testing.T) {
	out, errs, st := jobtest.Job(t, 4, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild)...)
	if st != 0 || strings.Count(out, "16 elements right on 4 processes, nothing to repair") != 4 {
		t.Fatalf("no failure: status %d\n%s\n%s", st, out, errs)
	}
	for _, c := range []struct {
		point string
		want  map[int]string
	}{
		{"accumulated", map[int]string{
			0: "22 elements right on 3 processes: repaired 0 undefined, recomputed 0 lost",
			1: "22 elements right on 3 processes: repaired 0 undefined, recomputed 12 lost",
			3: "20 elements right on 3 processes: repaired 16 undefined, recomputed 4 lost",
		}},
		{"start", map[int]string{
			0: "22 elements right on 3 processes: repaired 16 undefined, recomputed 0 lost",
			1: "22 elements right on 3 processes: repaired 16 undefined, recomputed 12 lost",
			3: "20 elements right on 3 processes: repaired 16 undefined, recomputed 4 lost",
		}},
	} {
		out, errs, st = jobtest.Job(t, 4, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild, inject.Env+"=2:"+c.point)...)
		for r, want := range c.want {
			if !strings.Contains(out, fmt.Sprintf("[%d] %s", r, want)) {
				t.Fatalf("rank 2 killed at %s: rank %d did not say %q (status %d):\n%s\n%s", c.point, r, want, st, out, errs)
			}
		}
	}
}
