//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/examples/internal/inject"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func TestMain(m *testing.M) {
	if os.Getenv("RIVET_EXAMPLE_CHILD") == "1" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := run(ctx); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMaster: 5 ranks; workers 2 and 3 die holding their first item;
// the master still gets every square once, and the other workers finish.
func TestMaster(t *testing.T) {
	out, errs, _ := jobtest.Job(t, 5, true, append(strings.Fields(provider(t)), "RIVET_EXAMPLE_CHILD=1", inject.Env+"=2:work,3:work")...)
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

// provider is the provider the example runs over: shared memory on the
// host, verbs in the soft-RoCE VM.
func provider(t *testing.T) string {
	if os.Getenv("RIVET_RXE_DEVICES") == "" && os.Getenv(testutil.RequireEnv) != "1" {
		return "RIVET_PROVIDER=shm"
	}
	return "RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=" + testutil.RXEDevices(t)[0]
}
