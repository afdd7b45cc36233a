//go:build linux

package fabric

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestRunstate: what the kernel says of a thread, as the detector reads
// it — asleep, stopped, frozen by a cgroup freezer (v1 and v2), gone.
func TestRunstate(t *testing.T) {
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	await := func(want Runstate, what string) {
		t.Helper()
		var rs Runstate
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if rs = threadRunstate(pid, pid); rs == want {
				return
			}
		}
		t.Fatalf("%s: %v, want %v", what, rs, want)
	}
	await(RunAsleep, "sleeping")
	cmd.Process.Signal(syscall.SIGSTOP)
	await(RunStopped, "SIGSTOPped")
	cmd.Process.Signal(syscall.SIGCONT)
	await(RunAsleep, "continued")
	for _, fz := range freezers(t) {
		dir, err := os.MkdirTemp(fz.root, "rivet-test-")
		if err != nil {
			t.Fatal(err)
		}
		write := func(file, v string) {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
		write("cgroup.procs", strconv.Itoa(pid))
		write(fz.file, fz.freeze)
		thawed := false
		defer func() { // a frozen process cannot even die
			if !thawed {
				write(fz.file, fz.thaw)
			}
		}()
		await(RunFrozen, fz.name+" freezer")
		write(fz.file, fz.thaw)
		thawed = true
		await(RunAsleep, "thawed")
		os.WriteFile(filepath.Join(fz.root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
		t.Logf("%s freezer: frozen, then thawed", fz.name)
	}
	cmd.Process.Kill()
	cmd.Wait()
	await(RunGone, "killed and reaped")
}

type freezer struct{ name, root, file, freeze, thaw string }

// freezers are the cgroup freezers this machine has mounted: v1's, and
// the v2 hierarchy's (cgroup.freeze, in every v2 group).
func freezers(t *testing.T) []freezer {
	if os.Geteuid() != 0 {
		if os.Getenv(testutil.ToolsEnv) == "1" || os.Getenv(testutil.RequireEnv) == "1" {
			t.Fatal("the freezers need root")
		}
		t.Log("not root: no freezer tried")
		return nil
	}
	var fs []freezer
	var st syscall.Statfs_t
	if syscall.Statfs("/sys/fs/cgroup/freezer", &st) == nil && st.Type == 0x27e0eb { // CGROUP_SUPER_MAGIC
		fs = append(fs, freezer{"v1", "/sys/fs/cgroup/freezer", "freezer.state", "FROZEN", "THAWED"})
	}
	v2 := ""
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if syscall.Statfs(root, &st) == nil && st.Type == 0x63677270 { // CGROUP2_SUPER_MAGIC
			v2 = root
			break
		}
	}
	if v2 == "" {
		// None mounted (a VM guest): mount one here, and have the
		// fabric read the mounts again.
		v2 = t.TempDir()
		if err := syscall.Mount("none", v2, "cgroup2", 0, ""); err != nil {
			t.Fatalf("mounting cgroup2: %v", err)
		}
		t.Cleanup(func() {
			syscall.Unmount(v2, syscall.MNT_DETACH)
			cgroupMounts = sync.OnceValues(readCgroupMounts)
		})
		cgroupMounts = sync.OnceValues(readCgroupMounts)
	}
	fs = append(fs, freezer{"v2", v2, "cgroup.freeze", "1", "0"})
	if len(fs) == 0 && (os.Getenv(testutil.ToolsEnv) == "1" || os.Getenv(testutil.RequireEnv) == "1") {
		t.Fatal("no cgroup freezer mounted")
	}
	return fs
}
