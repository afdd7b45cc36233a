//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestMain lets the test binary act as rivetrun itself, for the test that
// signals a real rivetrun process.
func TestMain(m *testing.M) {
	if os.Getenv("RIVETRUN_HELPER") == "1" {
		os.Exit(run([]string{"-n", "2", "sh", "-c", `trap 'echo got INT; kill $! 2>/dev/null; exit 3' INT; echo ready; sleep 30 & wait`}, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func rivetrun(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() { done <- run(args, &out, &errb) }()
	select {
	case st := <-done:
		return out.String(), errb.String(), st
	case <-time.After(60 * time.Second):
		t.Fatal("rivetrun did not return")
	}
	return "", "", -1
}

func TestRanksAndEnvironment(t *testing.T) {
	out, errs, st := rivetrun(t, "-n", "4", "-tag-output", "sh", "-c", `echo "rank $PMI_RANK of $PMI_SIZE fd $PMI_FD job ${PMI_JOBID%%-*}"`)
	if st != 0 {
		t.Fatalf("status %d: %s", st, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(lines)
	want := []string{"[0] rank 0 of 4 fd 3 job rivet", "[1] rank 1 of 4 fd 3 job rivet", "[2] rank 2 of 4 fd 3 job rivet", "[3] rank 3 of 4 fd 3 job rivet"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("output %q", lines)
	}
}

// TestPMIExchange runs the PMI package's own child test — the one that also
// runs under Hydra — under rivetrun: four processes bootstrap through
// rivetrun's PMI-2 server and exchange blobs.
func TestPMIExchange(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pmi.test")
	if out, err := exec.Command("go", "test", "-c", "-o", bin, "../../internal/pmi").CombinedOutput(); err != nil {
		t.Fatalf("building the pmi test: %v\n%s", err, out)
	}
	t.Setenv("RIVET_PMI_HYDRA_CHILD", "1")
	out, errs, st := rivetrun(t, "-n", "4", bin, "-test.run=^TestHydra$", "-test.v")
	if st != 0 {
		t.Fatalf("status %d\n%s\n%s", st, out, errs)
	}
	for r := 0; r < 4; r++ {
		if !strings.Contains(out, "hydra rank "+string(rune('0'+r))+" of 4 ok (PMI-2") {
			t.Errorf("rank %d did not report over PMI-2:\n%s", r, out)
		}
	}
}

// TestFailureEndsJob: one rank fails, the others (which would run for a
// minute) are stopped, and the job's status is the failed rank's.
func TestFailureEndsJob(t *testing.T) {
	start := time.Now()
	_, errs, st := rivetrun(t, "-n", "3", "-grace", "1s", "sh", "-c", `if [ "$PMI_RANK" = 1 ]; then exit 7; fi; sleep 60`)
	if st != 7 || !strings.Contains(errs, "rank 1 exited with status 7; stopping the other ranks") {
		t.Errorf("status %d, stderr %q", st, errs)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v: the other ranks were not stopped", d)
	}
	_, errs, st = rivetrun(t, "-n", "2", "sh", "-c", `[ "$PMI_RANK" = 0 ] && kill -KILL $$; sleep 60`)
	if st != 128+9 || !strings.Contains(errs, "rank 0 was killed by signal 9") {
		t.Errorf("killed rank: status %d, stderr %q", st, errs)
	}
}

// TestSignalForwarded: SIGTERM to rivetrun reaches every rank.
func TestSignalForwarded(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "RIVETRUN_HELPER=1")
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Both ranks have their trap set (and rivetrun, which catches
	// signals before it starts a rank, its handler) once both say ready.
	for deadline := time.Now().Add(30 * time.Second); strings.Count(out.String(), "ready") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the ranks never said ready:\n%s", out.String())
		}
	}
	cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+2 {
		t.Errorf("rivetrun after SIGINT: %v\n%s", err, out.String())
	}
	if c := strings.Count(out.String(), "got INT"); c != 2 {
		t.Errorf("%d ranks saw the signal, want 2:\n%s", c, out.String())
	}
}

func TestBadInput(t *testing.T) {
	for _, args := range [][]string{{}, {"-n", "0", "true"}, {"-n", "2"}, {"-bogus"}, {"-n", "2", "-expect-failures", "true"}} {
		if _, _, st := rivetrun(t, args...); st != 2 {
			t.Errorf("rivetrun %q: status %d, want 2", args, st)
		}
	}
	if _, errs, st := rivetrun(t, "-n", "1", "/no/such/program"); st != 127 || !strings.Contains(errs, "/no/such/program") {
		t.Errorf("missing program: %d %q", st, errs)
	}
}

// TestFT: with -ft a dead rank does not stop the job, and the others read
// which rank died on fd 4.
func TestFT(t *testing.T) {
	out, errs, st := rivetrun(t, "-n", "2", "-ft", "-tag-output", "sh", "-c",
		`if [ "$PMI_RANK" = 1 ]; then kill -9 $$; fi; read line <&$RIVET_FT_FD; echo "got: $line"`)
	if st != 137 {
		t.Fatalf("status %d, want 137\n%s\n%s", st, out, errs)
	}
	if !strings.Contains(out, "[0] got: failed rank=1 status=137 time=") {
		t.Errorf("rank 0 was not told:\n%s\n%s", out, errs)
	}
	if !strings.Contains(errs, "rank 1 was killed by signal 9 (killed); the others go on (-ft)") {
		t.Errorf("stderr:\n%s", errs)
	}
}

// TestExpectFailures: with -ft alone a job whose survivors all succeed
// exits with the dead rank's status; with -expect-failures it exits 0 —
// and still fails when a survivor fails, or when nobody survives. A rank
// ended by its peers' verdict (status 99) counts as failed, not as an
// error of the program.
func TestExpectFailures(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		script string
		want   int
	}{
		{[]string{"-ft"}, `[ "$PMI_RANK" = 1 ] && kill -9 $$; exit 0`, 137},
		{[]string{"-ft", "-expect-failures"}, `[ "$PMI_RANK" = 1 ] && kill -9 $$; exit 0`, 0},
		{[]string{"-ft", "-expect-failures"}, `[ "$PMI_RANK" = 1 ] && exit 99; exit 0`, 0},
		{[]string{"-ft", "-expect-failures"}, `[ "$PMI_RANK" = 1 ] && kill -9 $$; [ "$PMI_RANK" = 2 ] && exit 3; exit 0`, 3},
		{[]string{"-ft", "-expect-failures"}, `kill -9 $$`, 137},
	} {
		args := append(append([]string{"-n", "3"}, tc.args...), "sh", "-c", tc.script)
		if out, errs, st := rivetrun(t, args...); st != tc.want {
			t.Errorf("rivetrun %q: status %d, want %d\n%s\n%s", args, st, tc.want, out, errs)
		}
	}
}
