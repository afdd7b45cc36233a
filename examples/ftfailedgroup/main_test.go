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

// TestFailedGroup: 6 ranks, world ranks 1 and 4 killed after a barrier
// (which may then raise at a survivor still in it) or before it (it
// raises at every survivor); every survivor gets the same failed group
// both ways.
func TestFailedGroup(t *testing.T) {
	for _, point := range []string{"start", "init"} {
		t.Run(point, func(t *testing.T) {
			kill := fmt.Sprintf("%s=1:%s,4:%[2]s", inject.Env, point)
			out, errs, _ := jobtest.Job(t, 6, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild, kill)...)
			for _, r := range []int{0, 2, 3, 5} {
				if !strings.Contains(out, fmt.Sprintf("[%d] failed, by agreement [1 4], by shrink [1 4]", r)) {
					t.Fatalf("rank %d:\n%s\n%s", r, out, errs)
				}
			}
		})
	}
}
