//go:build linux

package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// RequireCluster is RequireVM for a test that boots an rxevm cluster, and
// it holds the machine's cluster lock until the test ends: go test runs
// packages side by side, and two clusters of single-vCPU emulated nodes
// at once on a small machine hold each other's vCPUs for longer than the
// failure detector's timeout allows a live node.
func RequireCluster(t testing.TB) {
	t.Helper()
	RequireVM(t)
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "rivet-cluster.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("the cluster lock: %v", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		t.Fatalf("the cluster lock: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases it
}
