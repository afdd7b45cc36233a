//go:build linux

package vm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// agentFlag is the argument /init passes when it execs the agent as PID 1.
const agentFlag = "-rxevm-guest-agent"

const shareDir = "/run/rxevm"

// IsAgent reports whether this process was started by the guest's /init.
// The runner's main calls it first and, if true, hands over to Agent.
func IsAgent() bool { return len(os.Args) == 2 && os.Args[1] == agentFlag && os.Getpid() == 1 }

// Agent runs inside the guest as PID 1: it finishes the mounts, builds the
// topology, runs the command with stdout on ttyS1 and stderr on ttyS2,
// writes the status to the share and powers the VM off. It never returns.
func Agent() {
	st := agentRun()
	b, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(shareDir, "status.json"), b, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "rxevm-agent: writing status: %v\n", err)
	}
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {} // PID 1 must not exit: that would panic the kernel
}

func agentRun() status {
	var st status
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil {
		st.BootNanos = ts.Nano()
	}
	out, errOut, err := openStdio()
	if err != nil {
		st.Setup = err.Error()
		return st
	}
	defer drain(out)
	defer drain(errOut)

	var sp spec
	b, err := os.ReadFile(filepath.Join(shareDir, "spec.json"))
	if err == nil {
		err = json.Unmarshal(b, &sp)
	}
	if err != nil {
		st.Setup = "reading the run spec: " + err.Error()
		return st
	}
	if err := guestMounts(); err != nil {
		st.Setup = err.Error()
		return st
	}
	if st.Clock = checkClock(); st.Clock != "" {
		if sp.Node > 1 { // (node 1's status says it)
			fmt.Fprintf(errOut, "rxevm: %s: %v: %s\n", NodeName(sp.Node), ErrClock, st.Clock)
		}
		return st
	}
	if sp.Node > 0 {
		os.MkdirAll(ClusterShared, 0o755)
		if err := unix.Mount(clusterTag, ClusterShared, "9p", 0, "trans=virtio,version=9p2000.L,msize=262144"); err != nil {
			st.Setup = fmt.Sprintf("mounting the cluster's shared directory: %v", err)
			return st
		}
	}
	hostname := "rxevm"
	if sp.Node > 0 {
		hostname = NodeName(sp.Node)
	}
	unix.Sethostname([]byte(hostname))
	os.Clearenv()
	for _, kv := range sp.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	desc, env, err := setupTopology(sp.Topology, sp.Node)
	if err != nil {
		st.Setup = fmt.Sprintf("topology %s: %v", sp.Topology, err)
		fmt.Fprintf(errOut, "rxevm: %s\n", st.Setup)
		return st
	}
	if !sp.Quiet {
		fmt.Fprintf(errOut, "rxevm: topology %s: %s\n", sp.Topology, desc)
	}

	if sp.Node > 1 {
		runNode(sp, env, out, errOut) // never returns: the runner stops this node
	}
	path, err := exec.LookPath(sp.Args[0])
	if err != nil {
		fmt.Fprintf(errOut, "rxevm: %v\n", err)
		st.Exit = 127
		return st
	}
	cmd := exec.Command(path, sp.Args[1:]...)
	cmd.Args[0] = sp.Args[0]
	cmd.Env = append(sp.Env, env...)
	cmd.Dir = sp.Dir
	cmd.Stdout, cmd.Stderr = out, errOut
	if sp.Dir != "" {
		if _, err := os.Stat(sp.Dir); err != nil {
			st.Setup = fmt.Sprintf("working directory %s is not visible in the VM: %v", sp.Dir, pathErr(err))
			return st
		}
	}
	// Tell the host the guest came up: from here on only the command's
	// own time counts.
	claimStart()
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			st.Signal = int(ws.Signal())
		} else {
			st.Exit = ws.ExitStatus()
		}
	default:
		fmt.Fprintf(errOut, "rxevm: %v\n", err)
		st.Exit = 126
	}
	return st
}

// openStdio opens the two serial ports the host reads and makes them raw, so
// the command's bytes arrive unchanged (no "\n" -> "\r\n").
func openStdio() (*os.File, *os.File, error) {
	var fs [2]*os.File
	for i, name := range []string{"/dev/ttyS1", "/dev/ttyS2"} {
		f, err := os.OpenFile(name, os.O_WRONLY|unix.O_NOCTTY, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("opening %s: %w", name, err)
		}
		if err := makeRaw(f); err != nil {
			return nil, nil, fmt.Errorf("making %s raw: %w", name, err)
		}
		fs[i] = f
	}
	return fs[0], fs[1], nil
}

// drain waits until the UART has sent everything (tcdrain), so powering off
// does not cut the command's last lines.
func drain(f *os.File) {
	unix.IoctlSetInt(int(f.Fd()), unix.TCSBRK, 1)
}

// guestMounts completes the file system /init started: /init mounted the
// overlay root, /dev, /proc and the share.
func guestMounts() error {
	mounts := []struct{ src, dst, fstype, data string }{
		{"sysfs", "/sys", "sysfs", ""},
		{"devpts", "/dev/pts", "devpts", "ptmxmode=0666"},
		{"shm", "/dev/shm", "tmpfs", "mode=1777"},
		{"bpf", "/sys/fs/bpf", "bpf", ""},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", ""},
	}
	for i, m := range mounts {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fstype, 0, m.data); err != nil && i < 3 {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	return nil
}

// claimStart creates the share's started file, which the host creates
// instead when it gives up on the guest (watchStart): whoever creates it
// first decides. A guest the host gave up on does not start the command,
// so a command never runs in a guest the host is killing and then again
// in the next; it waits to be killed. (Any other error leaves the host
// to decide by its timeouts, as before the file.)
func claimStart() {
	f, err := os.OpenFile(filepath.Join(shareDir, startedFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		for {
			time.Sleep(time.Hour)
		}
	}
	if err == nil {
		f.Close()
	}
}

// runNode is the life of a cluster node other than node 1: it runs its
// command, if any, and then waits to be stopped with the VM.
func runNode(sp spec, env []string, out, errOut *os.File) {
	claimStart()
	if len(sp.Args) > 0 {
		cmd := exec.Command(sp.Args[0], sp.Args[1:]...)
		cmd.Env = append(sp.Env, env...)
		cmd.Dir = sp.Dir
		cmd.Stdout, cmd.Stderr = out, errOut
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(errOut, "rxevm: %s: %v\n", NodeName(sp.Node), err)
		}
	}
	for {
		// PID 1 reaps the orphans of whatever the command started. With
		// none left, it sleeps (a bare select{} would be the runtime's
		// deadlock, and PID 1's exit a kernel panic).
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, 0, nil); err != nil {
			time.Sleep(time.Second)
		}
	}
}
