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

// TestMaster: 5 ranks; workers 2 and 3 die holding their first item;
// the master still gets every square once, and the other workers finish.
func TestMaster(t *testing.T) {
	out, errs, _ := jobtest.Job(t, 5, true, append(testutil.ProviderEnv(t), jobtest.ExampleChild, inject.Env+"=2:work,3:work")...)
	want := fmt.Sprintf("[0] sum of squares 1..%d: %d (want %d); failed workers [", Items, Items*(Items+1)*(2*Items+1)/6, Items*(Items+1)*(2*Items+1)/6)
	if !strings.Contains(out, want) {
		t.Fatalf("want %q\n%s\n%s", want, out, errs)
	}
	for _, r := range []int{2, 3} {
		if !strings.Contains(errs, fmt.Sprintf("rank %d was killed by signal 9", r)) {
			t.Fatalf("worker %d did not die\n%s\n%s", r, out, errs)
		}
	}
	for _, r := range []int{0, 1, 4} {
		if strings.Contains(errs, fmt.Sprintf("rank %d exited with status", r)) {
			t.Fatalf("rank %d failed\n%s\n%s", r, out, errs)
		}
	}
}
