//go:build linux

package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/jobtest"
)

func TestMain(m *testing.M) { jobtest.ExampleMain(m, run) }

func TestFourRanks(t *testing.T) {
	out, errs, st := jobtest.Job(t, 4, false, jobtest.ExampleChild)
	if st != 0 || !strings.Contains(out, "[0] 4 ranks via pmi-2: token 6, sums [6 4 14]") {
		t.Fatalf("status %d\n%s\n%s", st, out, errs)
	}
}

func TestAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range []string{"PMI_FD", "PMI_PORT", "RANK", "WORLD_SIZE", "SLURM_PROCID"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	if err := run(ctx); err != nil {
		t.Fatal(err)
	}
}
