//go:build linux

package main

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func TestMain(m *testing.M) { jobtest.ExampleMain(m, run) }

var (
	result  = regexp.MustCompile(`world rank (\d): (\d) of (\d): checksum (\S+)`)
	restart = regexp.MustCompile(`processes go on from step (\d+)`)
)

// finish runs the example on 4 processes with kills and returns how
// many finished and the checksum they printed (the same everywhere, or
// the test fails).
func finish(t *testing.T, kills string) (n int, sum string, from []string) {
	t.Helper()
	env := append(testutil.ProviderEnv(t), jobtest.ExampleChild, "FTCHECKPOINT_DIR="+t.TempDir())
	if kills != "" {
		env = append(env, inject.Env+"="+kills)
	}
	out, errs, st := jobtest.Job(t, 4, true, env...)
	for _, m := range restart.FindAllStringSubmatch(out, -1) {
		if len(from) == 0 || from[len(from)-1] != m[1] {
			from = append(from, m[1])
		}
	}
	for _, m := range result.FindAllStringSubmatch(out, -1) {
		if sum != "" && m[4] != sum {
			t.Fatalf("kills %q: checksums differ\n%s\n%s", kills, out, errs)
		}
		sum = m[4]
		n++
	}
	if n == 0 {
		t.Fatalf("kills %q: status %d; no process finished\n%s\n%s", kills, st, out, errs)
	}
	return n, sum, from
}

// TestCheckpoint: the run ends with the failure-free result after a
// process dies between checkpoints, in the middle of a checkpoint (its
// file is left incomplete and the survivors restart from the one
// before), right after one, two at once in the middle of one, and one
// after another; each time the survivors restart from the last complete
// checkpoint.
func TestCheckpoint(t *testing.T) {
	n, want, _ := finish(t, "")
	if n != 4 {
		t.Fatalf("no failure: %d processes finished", n)
	}
	for _, c := range []struct {
		kills string
		n     int
		from  string // the steps the survivors restarted from
	}{
		{"2:step4", 3, "[3]"},
		{"2:ckpt6", 3, "[3]"},
		{"1:step6", 3, "[6]"},
		{"2:ckpt6,0:ckpt6", 2, "[3]"},
		{"3:step2,1:ckpt9", 2, "[0 6]"},
	} {
		got, sum, from := finish(t, c.kills)
		if got != c.n || sum != want || fmt.Sprint(from) != c.from {
			t.Errorf("kills %q: %d processes finished with checksum %s, restarting from steps %v; want %d with %s (no failure), from %s", c.kills, got, sum, from, c.n, want, c.from)
		}
	}
}
