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

// TestSplit: 6 ranks; without a failure the split works at once; with
// world rank 2 killed before it, every survivor sees it fail, shrinks and
// splits again: color 0 is ranks 0 and 4, color 1 ranks 1, 3 and 5.
func TestSplit(t *testing.T) {
	out, errs, st := jobtest.Job(t, 6, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild)...)
	if st != 0 || strings.Count(out, "color 0: 3 members, world ranks summing to 6") != 3 ||
		strings.Count(out, "color 1: 3 members, world ranks summing to 9") != 3 {
		t.Fatalf("no failure: status %d\n%s\n%s", st, out, errs)
	}
	out, errs, _ = jobtest.Job(t, 6, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild, inject.Env+"=2:split")...)
	for want, n := range map[string]int{"color 0: 2 members, world ranks summing to 4": 2, "color 1: 3 members, world ranks summing to 9": 3} {
		if strings.Count(out, want) != n {
			t.Fatalf("want %q from each of %d members\n%s\n%s", want, n, out, errs)
		}
	}
	for _, r := range []int{0, 1, 3, 4, 5} {
		if !strings.Contains(out, fmt.Sprintf("[%d] split failed consistently", r)) {
			t.Fatalf("rank %d did not see the split fail\n%s\n%s", r, out, errs)
		}
	}
}
