//go:build linux

// Package jobtest runs a test binary as the ranks of a job, through
// rivetrun's engine (internal/launch). It is apart from testutil because
// launch imports pmi, whose own tests use testutil.
package jobtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/launch"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// Job runs this test binary on n ranks through rivetrun's engine — each
// rank running the program env names instead of the tests — with output
// tagged "[rank] ", and returns stdout, stderr and the job's status.
func Job(t testing.TB, n int, ft bool, env ...string) (string, string, int) {
	t.Helper()
	return job(launch.Options{N: n, FT: ft, Bind: launch.BindNone, Env: env})
}

// JobWith is Job with the launcher's options given whole (N, FT, Env and
// the rest); output is tagged and the job's context, grace and streams
// are Job's.
func JobWith(t testing.TB, o launch.Options) (string, string, int) {
	t.Helper()
	return job(o)
}

func job(o launch.Options) (string, string, int) {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	o.Tag, o.Grace, o.Stdout, o.Stderr = true, time.Second, &out, &errb
	st := launch.Run(ctx, o, []string{os.Args[0], "-test.run=^$"})
	return out.String(), errb.String(), st
}

// JobOK is Job without -ft that fails the test unless every rank printed
// "rank R ok".
func JobOK(t testing.TB, n int, env ...string) string {
	t.Helper()
	return jobOK(t, launch.Options{N: n, Bind: launch.BindNone, Env: env})
}

// BoundJobOK is JobOK with rank r pinned to CPU r mod NumCPU from its
// start, as rivetrun -bind-to core and mpirun --bind-to core pin.
func BoundJobOK(t testing.TB, n int, env ...string) string {
	t.Helper()
	return jobOK(t, launch.Options{N: n, Bind: launch.BindCore, Env: env})
}

func jobOK(t testing.TB, o launch.Options) string {
	t.Helper()
	n, env := o.N, o.Env
	out, errs, st := job(o)
	if st != 0 {
		t.Fatalf("%v on %d ranks: status %d\nstdout:\n%s\nstderr:\n%s", env, n, st, out, errs)
	}
	for r := 0; r < n; r++ {
		if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
			t.Fatalf("rank %d did not finish:\n%s\n%s", r, out, errs)
		}
	}
	return out
}

// ExampleChild marks the ranks of a job an example's test started.
const ExampleChild = "RIVET_EXAMPLE_CHILD=1"

// ExampleMain is the TestMain of an example's tests: in a rank of a job
// the test started (ExampleChild in its environment) it runs the
// example's run, bounded by a minute, and exits with its outcome;
// otherwise it runs the tests.
func ExampleMain(m *testing.M, run func(context.Context) error) {
	if os.Getenv("RIVET_EXAMPLE_CHILD") == "1" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := run(ctx)
		cancel()
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Mpirun runs this test binary on n processes under Open MPI's mpirun
// (flags before the program), each process with env added, and returns
// stdout, stderr and mpirun's exit status. It skips the test where Open
// MPI is not installed, unless RIVET_REQUIRE_TOOLS is set.
func Mpirun(t testing.TB, n int, flags []string, env ...string) (string, string, int) {
	t.Helper()
	mpirun := testutil.LookTool(t, "mpirun.openmpi", "openmpi-bin")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	args := append(append([]string{"-n", strconv.Itoa(n), "--oversubscribe"}, flags...), os.Args[0], "-test.run=^$")
	cmd := exec.CommandContext(ctx, mpirun, args...)
	cmd.Env = append(append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	st := -1
	if cmd.ProcessState != nil {
		st = cmd.ProcessState.ExitCode()
	} else {
		fmt.Fprintf(&errb, "jobtest: %v", err)
	}
	return out.String(), errb.String(), st
}
