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

// TestSkeleton: 4 ranks; without a failure each step's allreduce sums
// the step four times; with world rank 2 killed at step 4, the survivors
// redo step 4 on 3 and finish together: 4·(1+2+3) + 3·(4+…+10) = 171.
func TestSkeleton(t *testing.T) {
	out, errs, st := jobtest.Job(t, 4, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild)...)
	if st != 0 || strings.Count(out, "of 4 survivors: sum 220") != 4 {
		t.Fatalf("no failure: status %d\n%s\n%s", st, out, errs)
	}
	out, errs, _ = jobtest.Job(t, 4, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild, inject.Env+"=2:step4")...)
	for _, r := range []int{0, 1, 3} {
		if !strings.Contains(out, fmt.Sprintf("[%d] rank", r)) || strings.Count(out, "of 3 survivors: sum 171") != 3 {
			t.Fatalf("world rank %d:\n%s\n%s", r, out, errs)
		}
	}
}
