// Package testutil holds helpers shared by Rivet's tests: gating tests that
// need soft-RoCE, a VM or an external tool, and checking that a test leaks
// no file descriptors.
package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RequireEnv is set (to 1) by the test script for runs inside rxevm. It turns
// every "no RDMA here" skip into a failure, so a test that should run on
// soft-RoCE can never be counted as passing by being skipped.
const RequireEnv = "RIVET_REQUIRE_RDMA"

// RXEDevices returns the soft-RoCE devices the VM topology built (from
// RIVET_RXE_DEVICES, set by rxevm) and logs them, so test output shows which
// device each test ran on. Without any, the test is skipped with the reason,
// or fails if RIVET_REQUIRE_RDMA=1.
func RXEDevices(t testing.TB) []string {
	t.Helper()
	v := os.Getenv("RIVET_RXE_DEVICES")
	if v == "" {
		Unavailable(t, "no soft-RoCE topology: run under `rxevm -topology rxe` (see docs/rxevm.md)")
	}
	devs := strings.Split(v, ",")
	t.Logf("soft-RoCE devices: %s (topology %s)", v, os.Getenv("RXEVM_TOPOLOGY"))
	return devs
}

// RequireRoot skips (or, under RIVET_REQUIRE_RDMA=1, fails) unless root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root (CAP_NET_ADMIN)")
	}
}

// VMEnv is set (to 1) by the test script for the host tests: a test that
// boots a VM then fails, rather than skips, without qemu or a kernel.
const VMEnv = "RIVET_REQUIRE_VM"

// RequireVM skips a host test that boots an rxevm guest when
// qemu-system-x86_64 or a /boot/vmlinuz-* kernel is missing, or fails it
// under RIVET_REQUIRE_VM=1.
func RequireVM(t testing.TB) {
	t.Helper()
	_, qerr := exec.LookPath("qemu-system-x86_64")
	kernels, _ := filepath.Glob("/boot/vmlinuz-*")
	if qerr == nil && len(kernels) > 0 {
		return
	}
	if os.Getenv(VMEnv) == "1" {
		t.Fatalf("qemu-system-x86_64 or /boot/vmlinuz-* missing, and %s=1 forbids skipping", VMEnv)
	}
	t.Skip("needs qemu-system-x86 and linux-image-amd64")
}

// InVM reports whether the test runs inside an rxevm guest.
func InVM() bool { return os.Getenv("RXEVM_TOPOLOGY") != "" }

// Unavailable skips the test for why, or fails it under RIVET_REQUIRE_RDMA=1,
// where everything the VM suite needs is installed.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s, and %s=1 forbids skipping", why, RequireEnv)
	}
	t.Skip(why)
}

// CheckFDs fails the test if it ends with more open file descriptors than it
// started with. Call it first in a test that opens devices or sockets.
func CheckFDs(t testing.TB) {
	t.Helper()
	before := openFDs(t)
	t.Cleanup(func() {
		after := openFDs(t)
		for fd, target := range after {
			// The runtime's netpoller fds appear on first use and stay.
			if target == "anon_inode:[eventpoll]" || target == "anon_inode:[eventfd]" {
				continue
			}
			if _, ok := before[fd]; !ok {
				t.Errorf("leaked fd %s -> %s", fd, target)
			}
		}
	})
}

func openFDs(t testing.TB) map[string]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("reading /proc/self/fd: %v", err)
	}
	m := make(map[string]string, len(ents))
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own fd, closed by now
		}
		m[e.Name()] = target
	}
	return m
}

// ToolsEnv is set (to 1) by the test script for the host tests: every tool
// it installs must then be there, and a test that needs one fails rather
// than skips without it.
const ToolsEnv = "RIVET_REQUIRE_TOOLS"

// LookTool returns the path of an external program, or skips the test
// (fails it under RIVET_REQUIRE_TOOLS=1) naming the Debian package.
func LookTool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		why := fmt.Sprintf("%s (Debian's %s) is not installed", name, pkg)
		if os.Getenv(ToolsEnv) == "1" {
			t.Fatalf("%s, and %s=1 forbids skipping", why, ToolsEnv)
		}
		t.Skip(why)
	}
	return p
}

// ProviderEnv is the environment that makes a job's ranks use the
// provider a test runs over where it runs: shared memory on a host;
// verbs alone (every peer over RDMA loopback, on the first soft-RoCE
// device) in the VM. (scripts/test.sh runs the packages whose tests call
// it, or RXEDevices, in the VM.)
func ProviderEnv(t testing.TB) []string {
	if os.Getenv("RIVET_RXE_DEVICES") == "" && os.Getenv(RequireEnv) != "1" {
		return []string{"RIVET_PROVIDER=shm"}
	}
	return []string{"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + RXEDevices(t)[0]}
}

// shmNamespaceEnv names the test that ShmNamespace runs again inside a
// namespace of its own.
const shmNamespaceEnv = "RIVET_TEST_SHM_NAMESPACE"

// ShmNamespace runs the calling test again, in a mount namespace whose
// /dev/shm is a tmpfs of size bytes (Docker gives a container 64 MiB),
// fails t unless it passes there, and reports true: the caller is done.
// Inside that namespace it reports false, and the caller runs its body.
// It skips t without root or unshare(1).
func ShmNamespace(t *testing.T, size int) bool {
	t.Helper()
	if os.Getenv(shmNamespaceEnv) == t.Name() {
		return false
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, for a mount namespace with a /dev/shm of its own")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare (util-linux)")
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c",
		fmt.Sprintf(`mount -t tmpfs -o size=%d tmpfs /dev/shm && exec "$0" -test.run='^%s$' -test.v`, size, t.Name()), os.Args[0])
	cmd.Env = append(os.Environ(), shmNamespaceEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("in a namespace with a /dev/shm of %d MiB: %v\n%s", size>>20, err, out)
	}
	t.Logf("in a namespace with a /dev/shm of %d MiB:\n%s", size>>20, out)
	return true
}
