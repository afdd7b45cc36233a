//go:build linux

package testutil

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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

// RunCluster boots a cluster of nodes rxevm VMs, holding the machine's
// cluster lock (RequireCluster): node1 runs cmd, every other node the
// shell command nodeCmd, with env added to the environment. It returns
// node1's stdout and the runner's stderr (the other nodes' output,
// tagged), and fails t if rxevm fails or the cluster runs past 7 minutes.
func RunCluster(t testing.TB, nodes int, nodeCmd string, env []string, cmd ...string) (stdout, stderr string) {
	t.Helper()
	RequireCluster(t)
	rxevm := filepath.Join(t.TempDir(), "rxevm")
	build := exec.Command("go", "build", "-o", rxevm, "github.com/rivet-hpc/rivet/cmd/rxevm")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rxevm: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, rxevm, append([]string{"-topology", fmt.Sprintf("cluster:%d", nodes), "-timeout", "7m",
		"-node-cmd", nodeCmd, "--"}, cmd...)...)
	run.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	run.Stdout, run.Stderr = &out, &errb
	err := run.Run()
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	if err != nil {
		t.Fatalf("rxevm: %v", err)
	}
	return out.String(), errb.String()
}

// Executable is the running test binary's path, which a cluster's nodes
// can run too.
func Executable(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}
