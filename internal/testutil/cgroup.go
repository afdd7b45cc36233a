//go:build linux

package testutil

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// CPUQuota makes a cgroup whose processes together get quota of CPU time
// in every period — cgroup v2's cpu.max, v1's cpu.cfs_quota_us — the way
// a batch system confines a job: once the quota is spent, every thread of
// the group waits, runnable, for the next period. It returns the file a
// process writes its pid to in order to join (JoinCgroup), and removes
// the cgroup when the test ends (its processes must have exited). It uses
// the cpu controller where it is mounted, or mounts cgroup2 (a VM guest
// has none mounted); without root or the controller the test skips, or
// fails under RIVET_REQUIRE_TOOLS=1 (and in the VM suite).
func CPUQuota(t testing.TB, quota, period time.Duration) string {
	t.Helper()
	root, v2, err := cpuController(t)
	if err != nil {
		if os.Getenv(ToolsEnv) == "1" || os.Getenv(RequireEnv) == "1" {
			t.Fatalf("CPU quota: %v", err)
		}
		t.Skipf("CPU quota: %v", err)
	}
	dir, err := os.MkdirTemp(root, "rivet-test-")
	if err != nil {
		t.Fatalf("CPU quota: %v", err)
	}
	t.Cleanup(func() {
		// The group's processes were reaped by now; a cgroup whose last
		// process just exited may still be busy for a moment.
		for i := 0; ; i++ {
			if err := unix.Rmdir(dir); err == nil || i == 100 {
				if err != nil {
					t.Errorf("removing cgroup %s: %v", dir, err)
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	q, p := quota.Microseconds(), period.Microseconds()
	if v2 {
		err = os.WriteFile(filepath.Join(dir, "cpu.max"), fmt.Appendf(nil, "%d %d", q, p), 0)
	} else if err = os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), fmt.Appendf(nil, "%d", p), 0); err == nil {
		err = os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), fmt.Appendf(nil, "%d", q), 0)
	}
	if err != nil {
		t.Fatalf("CPU quota: %v", err)
	}
	return filepath.Join(dir, "cgroup.procs")
}

// JoinCgroup moves the calling process, every thread of it, into the
// cgroup whose cgroup.procs file procs is.
func JoinCgroup(procs string) error {
	return os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0)
}

// cpuController finds where the cpu controller can make groups: a cgroup
// v1 hierarchy that has it, or a cgroup2 one (mounting cgroup2 in a
// temporary directory when none is mounted), with cpu enabled for the
// root's children.
func cpuController(t testing.TB) (root string, v2 bool, err error) {
	if os.Geteuid() != 0 {
		return "", false, fmt.Errorf("needs root")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	var unified string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS…] - FSTYPE SOURCE SUPEROPTS"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 5 || len(b) < 3 || a[3] != "/" {
			continue
		}
		switch b[0] {
		case "cgroup":
			if slices.Contains(strings.Split(b[2], ","), "cpu") {
				return a[4], false, nil
			}
		case "cgroup2":
			unified = a[4]
		}
	}
	if unified == "" {
		dir := t.TempDir()
		if err := unix.Mount("none", dir, "cgroup2", 0, ""); err != nil {
			return "", false, fmt.Errorf("mounting cgroup2: %w", err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
		unified = dir
	}
	b, err := os.ReadFile(filepath.Join(unified, "cgroup.controllers"))
	if err != nil || !slices.Contains(strings.Fields(string(b)), "cpu") {
		return "", false, fmt.Errorf("no cpu controller in %s (%q)", unified, b)
	}
	if err := os.WriteFile(filepath.Join(unified, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
		return "", false, fmt.Errorf("enabling cpu in %s: %w", unified, err)
	}
	return unified, true, nil
}

// CPUHogs starts one busy process on each CPU this process may use, at
// its priority, each pinned to its CPU, and stops them when the test
// ends: the same-priority neighbours of a loaded node.
func CPUHogs(t testing.TB) {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatalf("CPU hogs: %v", err)
	}
	for cpu := 0; cpu < 1024 && set.Count() > 0; cpu++ {
		if !set.IsSet(cpu) {
			continue
		}
		set.Clear(cpu)
		cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("CPU hog: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(cmd.Process.Pid, &one); err != nil {
			t.Fatalf("CPU hog on CPU %d: %v", cpu, err)
		}
	}
}
