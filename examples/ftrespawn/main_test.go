//go:build linux

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func TestMain(m *testing.M) { jobtest.ExampleMain(m, run) }

var result = regexp.MustCompile(`rank (\d) of 4 \(world rank (\d+)\): checksum (\S+)`)

// finish runs the example on 4 processes with kills and returns, by
// number, the world rank that finished it and the checksum every one
// printed (the same everywhere, or the test fails).
func finish(t *testing.T, kills string) (map[string]string, string) {
	t.Helper()
	env := append(testutil.ProviderEnv(t), jobtest.ExampleChild, fabric.UniverseEnv+"=12")
	if kills != "" {
		env = append(env, inject.Env+"="+kills)
	}
	out, errs, st := jobtest.Job(t, 4, true, env...)
	ranks, sum := map[string]string{}, ""
	for _, m := range result.FindAllStringSubmatch(out, -1) {
		if sum != "" && m[3] != sum {
			t.Fatalf("kills %q: checksums differ\n%s\n%s", kills, out, errs)
		}
		sum, ranks[m[1]] = m[3], m[2]
	}
	if len(ranks) != 4 || strings.Count(out, "checksum") != 4 {
		t.Fatalf("kills %q: status %d; %d processes finished\n%s\n%s", kills, st, len(ranks), out, errs)
	}
	t.Logf("kills %q: finished by world ranks %v", kills, ranks)
	if os.Getenv("FTRESPAWN_LOG") != "" {
		t.Logf("\n%s\n%s", out, errs)
	}
	return ranks, sum
}

// TestRespawn: the job ends at full size with the failure-free result
// after one failure, two in a row (the replacement killed too), and one
// at each step of the recovery: before the shrink, at the spawn root
// before it spawns (the survivors start again and replace both), and in
// the hand-over before the merge (the first replacement is abandoned).
func TestRespawn(t *testing.T) {
	_, want := finish(t, "")
	for _, c := range []struct {
		kills    string
		replaced map[string]string // number → the world rank that must have finished it
	}{
		{"2:step4", map[string]string{"2": "4"}},
		{"2:step3,4:step6", map[string]string{"2": "5"}},
		{"2:step4,0:shrink", map[string]string{"0": "4", "2": "5"}},
		{"2:step4,0:spawn", map[string]string{"0": "4", "2": "5"}},
		{"2:step4,0:merge", map[string]string{"0": "5", "2": "6"}},
	} {
		ranks, sum := finish(t, c.kills)
		if sum != want {
			t.Errorf("kills %q: checksum %s, want %s (no failure)", c.kills, sum, want)
		}
		for num, w := range c.replaced {
			if ranks[num] != w {
				t.Errorf("kills %q: number %s finished by world rank %s, want %s", c.kills, num, ranks[num], w)
			}
		}
	}
}

// TestHostUnderMpirun: the example under Open MPI's mpirun, whose PMIx
// server spawns the replacement (mpirun --enable-recovery keeps the job
// alive when rank 2 dies): full size again, world rank 4 in rank 2's
// place, the failure-free checksum.
func TestHostUnderMpirun(t *testing.T) {
	_, want := finish(t, "")
	out, errs, st := jobtest.Mpirun(t, 4, []string{"--enable-recovery"}, jobtest.ExampleChild, fabric.UniverseEnv+"=12", inject.Env+"=2:step4")
	ranks := map[string]string{}
	for _, m := range result.FindAllStringSubmatch(out, -1) {
		if m[3] != want {
			t.Fatalf("checksum %s, want %s\n%s\n%s", m[3], want, out, errs)
		}
		ranks[m[1]] = m[2]
	}
	if st != 0 || len(ranks) != 4 || ranks["2"] != "4" || strings.Count(out, "checksum") != 4 {
		t.Fatalf("status %d; finished by %v, want rank 2 by world rank 4\n%s\n%s", st, ranks, out, errs)
	}
}
