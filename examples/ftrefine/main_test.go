//go:build linux

package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func TestMain(m *testing.M) { jobtest.ExampleMain(m, run) }

// TestRefine: 6 ranks; world rank 5 dies at iteration 4, rank 1 at 9.
// The survivors converge together, in the same allreduce, on the same
// norm, below epsilon. Each survivor's own count of iterations may be one
// off either way: an allreduce a failure interrupted may have completed
// at some survivors (which counted it and moved on) and not at others
// (which redo it), so a process is one ahead or one behind after a
// recovery — and the norm, the largest of the survivors' (1+r)/2^k, is
// whichever survivor's is largest then: 5/2^23 (rank 4) when all count
// alike, 3/2^22 (rank 2) when rank 2 is one behind.
func TestRefine(t *testing.T) {
	out, errs, st := jobtest.Job(t, 6, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild)...)
	if st != 0 || strings.Count(out, "converged at iteration 23 on 6 processes after 0 recoveries") != 6 {
		t.Fatalf("no failure: status %d\n%s\n%s", st, out, errs)
	}
	out, errs, _ = jobtest.Job(t, 6, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild, inject.Env+"=5:iter4,1:iter9")...)
	norms := map[string]bool{}
	for _, r := range []int{0, 2, 3, 4} {
		m := regexp.MustCompile(fmt.Sprintf(`\[%d\] converged at iteration (\d+) on 4 processes after 2 recoveries: norm (\S+)\n`, r)).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("rank %d did not converge on 4 processes after 2 recoveries:\n%s\n%s", r, out, errs)
		}
		it, _ := strconv.Atoi(m[1])
		norm, err := strconv.ParseFloat(m[2], 64)
		if it < 22 || it > 24 || err != nil || norm <= 0 || norm > 1e-6 {
			t.Fatalf("rank %d: iteration %s, norm %s (want 22–24, and a norm in (0, 1e-6])\n%s", r, m[1], m[2], out)
		}
		norms[m[2]] = true
	}
	if len(norms) != 1 {
		t.Fatalf("the survivors converged on different norms %v:\n%s", norms, out)
	}
}
