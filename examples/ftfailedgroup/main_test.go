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

// TestFailedGroup: 6 ranks, world ranks 1 and 4 killed after a barrier;
// every survivor gets the same failed group both ways.
func TestFailedGroup(t *testing.T) {
	out, errs, _ := jobtest.Job(t, 6, true, append(strings.Fields(provider(t)), "RIVET_EXAMPLE_CHILD=1", inject.Env+"=1:start,4:start")...)
	for _, r := range []int{0, 2, 3, 5} {
		if !strings.Contains(out, fmt.Sprintf("[%d] failed, by agreement [1 4], by shrink [1 4]", r)) {
			t.Fatalf("rank %d:\n%s\n%s", r, out, errs)
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
