//go:build linux

package main

import (
	"fmt"
	"regexp"
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

// TestHostUnderMpirun: the skeleton under Open MPI's mpirun, its ranks met
// over mpirun's PMIx server. By default mpirun ends the whole job when a
// process dies (survivors still running are killed; its status is the dead
// process's); with --enable-recovery it lets the survivors recover and
// finish, and exits 0.
func TestHostUnderMpirun(t *testing.T) {
	out, errs, st := jobtest.Mpirun(t, 4, nil, jobtest.ExampleChild)
	if st != 0 || strings.Count(out, "of 4 survivors: sum 220") != 4 {
		t.Fatalf("no failure: status %d\n%s\n%s", st, out, errs)
	}
	out, errs, st = jobtest.Mpirun(t, 4, nil, jobtest.ExampleChild, inject.Env+"=2:step4")
	if st != 128+9 || !regexp.MustCompile(`noticed that process rank 2 with PID [0-9]+ on node .* exited on signal 9`).MatchString(errs+out) {
		t.Errorf("rank 2 killed, mpirun's default: status %d, want 137 and mpirun's notice\n%s\n%s", st, out, errs)
	}
	out, errs, st = jobtest.Mpirun(t, 4, []string{"--enable-recovery"}, jobtest.ExampleChild, inject.Env+"=2:step4")
	if st != 0 || strings.Count(out, "of 3 survivors: sum 171") != 3 {
		t.Errorf("rank 2 killed, --enable-recovery: status %d\n%s\n%s", st, out, errs)
	}
}
