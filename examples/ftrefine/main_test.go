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

// TestRefine: 6 ranks; world rank 5 dies at iteration 4, rank 1 at 9.
// The survivors converge together, in the same allreduce, on the same
// norm: the largest is the highest survivor's (rank 4: 5/2^k), below
// epsilon from its iteration 23 on. Each survivor's own count of
// iterations may be one off either way: an allreduce a failure
// interrupted may have completed at some survivors (which counted it and
// moved on) and not at others (which redo it), so a process is one
// ahead or one behind after a recovery.
func TestRefine(t *testing.T) {
	out, errs, st := jobtest.Job(t, 6, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild)...)
	if st != 0 || strings.Count(out, "converged at iteration 23 on 6 processes after 0 recoveries") != 6 {
		t.Fatalf("no failure: status %d\n%s\n%s", st, out, errs)
	}
	out, errs, _ = jobtest.Job(t, 6, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild, inject.Env+"=5:iter4,1:iter9")...)
	for _, r := range []int{0, 2, 3, 4} {
		ok := false
		for it := 22; it <= 24; it++ {
			ok = ok || strings.Contains(out, fmt.Sprintf("[%d] converged at iteration %d on 4 processes after 2 recoveries: norm 5.96e-07\n", r, it))
		}
		if !ok {
			t.Fatalf("rank %d:\n%s\n%s", r, out, errs)
		}
	}
}
