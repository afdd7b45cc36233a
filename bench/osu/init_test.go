//go:build linux

package osu

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/launch"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// initEnv makes this test binary a rank of TestHostInitLikeOpenMPIComparator's job.
const initEnv = "RIVET_OSU_TEST_INIT"

// childInit times fabric.Init and reports it as osu_init.
func childInit() int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	ep, err := fabric.Init(ctx)
	took := time.Since(t0)
	if err == nil {
		defer ep.Close()
		err = RunInit(ctx, ep.World(), took, os.Stdout)
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	return 0
}

// initRE is osu_init's output: OSU 7.4's header and line.
var initRE = regexp.MustCompile(`^# OSU MPI Init Test v7\.4\nnprocs: 4, min: (\d+) ms, max: (\d+) ms, avg: (\d+) ms\n$`)

// TestHostInitLikeOpenMPIComparator: osu_init on four ranks prints what
// OSU's does, and what the C comparator under Open MPI prints, but for
// the figures, which are consistent (min ≤ avg ≤ max).
func TestHostInitLikeOpenMPIComparator(t *testing.T) {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if st := launch.Run(ctx, launch.Options{N: 4, Bind: launch.BindNone, Env: []string{initEnv + "=1"}, Stdout: &out, Stderr: &errb},
		[]string{os.Args[0], "-test.run=^$"}); st != 0 {
		t.Fatalf("status %d\n%s\n%s", st, out.String(), errb.String())
	}
	check := func(who, got string) {
		m := initRE.FindStringSubmatch(got)
		if m == nil {
			t.Fatalf("%s printed %q, not OSU's osu_init", who, got)
		}
		lo, _ := strconv.Atoi(m[1])
		hi, _ := strconv.Atoi(m[2])
		avg, _ := strconv.Atoi(m[3])
		if lo > avg || avg > hi {
			t.Errorf("%s: min %d, avg %d, max %d are out of order", who, lo, avg, hi)
		}
	}
	check("rivet", out.String())

	mpicc := testutil.LookTool(t, "mpicc.openmpi", "libopenmpi-dev")
	mpirun := testutil.LookTool(t, "mpirun.openmpi", "openmpi-bin")
	bin := t.TempDir() + "/osu"
	if out, err := exec.Command(mpicc, "-O2", "-o", bin, "testdata/osu.c").CombinedOutput(); err != nil {
		t.Fatalf("building the comparator: %v\n%s", err, out)
	}
	cmd := exec.Command(mpirun, "-n", "4", "--oversubscribe", "--mca", "btl", "self,vader", bin, "init")
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("comparator: %v\n%s", err, stderr.String())
	}
	check("the Open MPI comparator", stdout.String())
}
