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

// TestFailedGroup: 6 ranks, world ranks 1 and 4 killed after a barrier;
// every survivor gets the same failed group both ways.
func TestFailedGroup(t *testing.T) {
	out, errs, _ := jobtest.Job(t, 6, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild, inject.Env+"=1:start,4:start")...)
	for _, r := range []int{0, 2, 3, 5} {
		if !strings.Contains(out, fmt.Sprintf("[%d] failed, by agreement [1 4], by shrink [1 4]", r)) {
			t.Fatalf("rank %d:\n%s\n%s", r, out, errs)
		}
	}
}
