//go:build linux

// Package slurminit times fabric.Init under Slurm for lab/init.sh: a test,
// since the Slurm it runs (internal/slurmtest) is a test's.
package slurminit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/slurmtest"
)

// TestInitUnderSlurm prints "slurm N MS" and "slurmpmix N MS" for each N
// in INIT_SLURM (a list of process counts): the osu_init average of
// `srun --mpi=pmi2 -n N rivet bench osu_init` and of the same with
// --mpi=pmix, on a one-node Slurm of 256 CPUs on this host. Without
// INIT_SLURM it measures nothing: lab/init.sh sets it.
func TestInitUnderSlurm(t *testing.T) {
	counts := strings.Fields(os.Getenv("INIT_SLURM"))
	if len(counts) == 0 {
		t.Skip("a measurement, run by lab/init.sh (INIT_SLURM=\"8 16 …\")")
	}
	bin := filepath.Join(t.TempDir(), "rivet")
	build := exec.Command("go", "build", "-C", "../..", "-o", bin, "./cmd/rivet")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rivet: %v\n%s", err, out)
	}
	c := slurmtest.Start(t, slurmtest.Options{Nodes: 1, CPUs: 256})
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	avg := regexp.MustCompile(`avg: (\d+) ms`)
	for _, n := range counts {
		for _, mpi := range []struct{ flag, name string }{{"--mpi=pmi2", "slurm"}, {"--mpi=pmix", "slurmpmix"}} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			out, errs, st := c.Run(ctx, nil, "srun", mpi.flag, "-n", n, bin, "bench", "osu_init")
			cancel()
			m := avg.FindStringSubmatch(out)
			if st != 0 || m == nil {
				t.Fatalf("%s processes, %s: status %d\n%s\n%s\n%s", n, mpi.flag, st, out, errs, c.Logs())
			}
			t.Logf("%s %s %s", mpi.name, n, m[1])
		}
	}
}
