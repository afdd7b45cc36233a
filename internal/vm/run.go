//go:build linux

package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Run boots a VM, runs cfg.Args inside it and returns how the command ended.
// A non-nil error means the runner itself failed (bad input, the VM could
// not be started, timed out, or died without a status); a command that ran
// and failed is reported in Result with a nil error.
func Run(ctx context.Context, cfg Config) (Result, error) {
	start := time.Now()
	var res Result
	if len(cfg.Args) == 0 {
		return res, errors.New("no command to run")
	}
	if cfg.Topology == "" {
		cfg.Topology = TopologyNone
	}
	if _, err := ParseTopology(string(cfg.Topology)); err != nil {
		return res, err
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	qemu, err := findQEMU(cfg.QEMU)
	if err != nil {
		return res, err
	}
	k, err := FindKernel(cfg.Kernel)
	if err != nil {
		return res, err
	}
	res.Kernel = k.Version
	if cfg.CacheDir == "" {
		cfg.CacheDir = DefaultCacheDir()
	}
	initrd, err := Initramfs(k, cfg.CacheDir)
	if err != nil {
		return res, err
	}
	k.Image = bootImage(k, cfg.CacheDir)
	accel, err := resolveAccel(ctx, cfg, qemu, k, initrd)
	if err != nil {
		return res, err
	}
	res.Accel = accel
	if accel == AccelTCG {
		if cfg.TSCkHz == 0 {
			cfg.TSCkHz = hostTSC()
		}
		res.TSCkHz = cfg.TSCkHz
	} else {
		cfg.TSCkHz = 0
	}

	runCtx := ctx
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	for attempt := 1; ; attempt++ {
		if cfg.Topology.Nodes() > 1 {
			err = bootCluster(ctx, runCtx, cfg, qemu, k, initrd, accel, &res)
		} else {
			err = boot(ctx, runCtx, cfg, qemu, k, initrd, accel, &res)
		}
		res.Total = time.Since(start)
		if errors.Is(err, ErrNoStart) && attempt == 1 {
			fmt.Fprintf(cfg.Stderr, "rxevm: %v\nrxevm: booting again\n", err)
			continue
		}
		return res, err
	}
}

// boot runs the VM once: ctx is the caller's, runCtx the whole run's
// (with Config.Timeout).
func boot(ctx, runCtx context.Context, cfg Config, qemu string, k Kernel, initrd string, accel Accel, res *Result) error {
	runDir, err := os.MkdirTemp("", "rxevm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(runDir)
	share := filepath.Join(runDir, "share")
	if err := os.Mkdir(share, 0o755); err != nil {
		return err
	}
	if err := installAgent(share); err != nil {
		return err
	}
	sp, _ := json.Marshal(spec{Args: cfg.Args, Env: cfg.Env, Dir: cfg.Dir, Topology: cfg.Topology, Quiet: cfg.Quiet})
	if err := os.WriteFile(filepath.Join(share, "spec.json"), sp, 0o644); err != nil {
		return err
	}

	var copies sync.WaitGroup
	outSock, err := streamSocket(filepath.Join(runDir, "out.sock"), cfg.Stdout, &copies)
	if err != nil {
		return err
	}
	defer outSock.Close()
	errSock, err := streamSocket(filepath.Join(runDir, "err.sock"), cfg.Stderr, &copies)
	if err != nil {
		return err
	}
	defer errSock.Close()

	console := filepath.Join(runDir, "console.log")
	qmp := filepath.Join(runDir, "qmp.sock")
	args := qemuArgs(cfg, accel, k, initrd, share, console, "")
	args = append(args,
		"-chardev", "socket,id=out,path="+filepath.Join(runDir, "out.sock"),
		"-chardev", "socket,id=err,path="+filepath.Join(runDir, "err.sock"),
		"-serial", "chardev:out", "-serial", "chardev:err",
		"-qmp", "unix:"+qmp+",server=on,wait=off")

	// qemu runs until the guest powers off or the caller gives up. The
	// agent leaves a file in the share when it starts the command; a guest
	// that has not by StartTimeout hung on the way, and one still running
	// at Timeout hung in the command: either is killed with a report of
	// what it was doing.
	qctx, stopQEMU := context.WithCancel(ctx)
	defer stopQEMU()
	kill := &hangKill{stop: stopQEMU}
	var noStart atomic.Bool
	if cfg.StartTimeout > 0 {
		go watchStart(qctx, filepath.Join(share, startedFile), cfg.StartTimeout, func() {
			noStart.Store(true)
			kill.hung("", qmp, console, 20)
		})
	}
	go func() {
		select {
		case <-runCtx.Done():
			if ctx.Err() == nil {
				kill.hung("", qmp, console, 20)
			}
			stopQEMU()
		case <-qctx.Done():
		}
	}()
	var qemuOut bytes.Buffer
	waitErr := runQEMU(qctx, qemu, args, &qemuOut)
	report := kill.result()
	// qemu closes its sockets when it exits; wait until every byte the
	// command wrote has been copied out.
	outSock.Close()
	errSock.Close()
	copies.Wait()

	st, stErr := readStatus(share)
	switch {
	case stErr == nil && st.Clock != "":
		return fmt.Errorf("%w: %s", ErrClock, st.Clock)
	case stErr == nil && st.Setup != "":
		return fmt.Errorf("%w: %s", ErrTopology, st.Setup)
	case stErr == nil:
		res.ExitCode, res.Signal = st.Exit, syscall.Signal(st.Signal)
		res.Boot = time.Duration(st.BootNanos)
		return nil
	case noStart.Load():
		return fmt.Errorf("%w within %v: the VM was killed%s", ErrNoStart, cfg.StartTimeout, report)
	case runCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		return fmt.Errorf("%w after %v: the VM was killed%s", ErrTimeout, cfg.Timeout, report)
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	why := "qemu exited"
	if waitErr != nil {
		why = "qemu: " + waitErr.Error()
	}
	if msg, err := os.ReadFile(filepath.Join(share, "init-error")); err == nil {
		why = strings.TrimSpace(string(msg))
	}
	if q := strings.TrimSpace(qemuOut.String()); q != "" {
		why += ": " + lastLines(q, 3)
	}
	return fmt.Errorf("%w (%s)%s", ErrNoStatus, why, consoleTail(console, 15))
}

// startedFile is what the agent creates in the share as it starts the
// command.
const startedFile = "started"

// hostClaim is what the host writes in a started file it created.
const hostClaim = "the host gave up on this guest\n"

// started reports whether the guest with this share started its command.
func started(share string) bool {
	b, err := os.ReadFile(filepath.Join(share, startedFile))
	return err == nil && string(b) != hostClaim
}

// watchStart calls expired unless the guest creates path within d or ctx
// ends. At d it creates path itself, so that a guest that comes up just
// then does not start the command (claimStart): whoever creates the file
// first decides.
func watchStart(ctx context.Context, path string, d time.Duration, expired func()) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err == nil {
				f.WriteString(hostClaim)
				f.Close()
			}
			if !errors.Is(err, fs.ErrExist) {
				expired()
			}
			return
		case <-tick.C:
			if _, err := os.Stat(path); err == nil {
				return
			}
		}
	}
}

// DefaultCacheDir is $RXEVM_CACHE, else the user cache directory's
// rivet/rxevm, else a directory under the system temp dir.
func DefaultCacheDir() string {
	if d := os.Getenv("RXEVM_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "rivet", "rxevm")
	}
	return filepath.Join(os.TempDir(), "rivet-rxevm-cache")
}

func findQEMU(name string) (string, error) {
	if name == "" {
		name = "qemu-system-x86_64"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s (apt-get install qemu-system-x86)", ErrNoQEMU, name)
	}
	return p, nil
}

// installAgent copies the running executable into the share: the guest runs
// it as the agent, so the agent always matches the host side's protocol.
func installAgent(share string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locating the agent: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(share, "agent"), os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// streamSocket listens on path and copies the one connection qemu makes to w.
func streamSocket(path string, w io.Writer, wg *sync.WaitGroup) (net.Listener, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(w, c)
	}()
	return l, nil
}

// qemuArgs is the qemu command line shared by runs and probes. The first
// serial port carries the kernel console into a file; runs add two more.
func qemuArgs(cfg Config, accel Accel, k Kernel, initrd, share, console, extraCmdline string) []string {
	mem := cfg.Memory
	if mem == "" {
		mem = "2G"
	}
	cpus := cfg.CPUs
	if cpus <= 0 {
		cpus = 2
	}
	// tsc=reliable: TCG's vCPUs look unsynchronized to the kernel, which
	// then falls back to the HPET, and every clock read becomes a 1.9 µs
	// emulated device access (measured); qemu derives the TSC from the
	// host's monotonic clock, so it is safe to keep. no_timer_check: at
	// boot the kernel checks that the IO-APIC's timer interrupt arrives
	// within a few emulated ticks and panics if not ("IO-APIC + timer
	// doesn't work"), which under TCG on a loaded host it may not: a
	// fresh-clone run of the suite beside busy processes lost a node so.
	// sysrq_always_enabled: a hung guest is asked for its stacks through
	// SysRq keys (hangReport).
	cmdline := "console=ttyS0 panic=-1 loglevel=4 rdinit=/init tsc=reliable no_timer_check sysrq_always_enabled"
	if cfg.TSCkHz > 0 && accel != AccelKVM {
		cmdline += fmt.Sprintf(" tsc_early_khz=%d", cfg.TSCkHz)
	}
	if extraCmdline != "" {
		cmdline += " " + extraCmdline
	}
	args := []string{
		"-nodefaults", "-no-user-config", "-no-reboot", "-display", "none", "-monitor", "none",
		"-m", mem, "-smp", fmt.Sprint(cpus),
		"-kernel", k.Image, "-initrd", initrd, "-append", cmdline,
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + share + ",mount_tag=rxevm,security_model=none,multidevs=remap",
		"-serial", "file:" + console,
	}
	if accel == AccelKVM {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		args = append(args, "-accel", "tcg")
	}
	return args
}

// runQEMU runs qemu until it exits or ctx ends, in which case it is killed.
// qemu also dies with the runner if the runner is killed: Pdeathsig fires
// when the starting thread exits, so the goroutine stays locked to it.
func runQEMU(ctx context.Context, qemu string, args []string, out *bytes.Buffer) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.CommandContext(ctx, qemu, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	return cmd.Run()
}

func readStatus(share string) (status, error) {
	var st status
	b, err := os.ReadFile(filepath.Join(share, "status.json"))
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// consoleTail formats the last n lines of the kernel console for an error.
func consoleTail(path string, n int) string {
	if n == 0 {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	// A panic's cause is above its stack trace: name it first.
	var cause string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "Kernel panic") {
			cause = "\n" + strings.TrimSpace(line)
			break
		}
	}
	return cause + "\nlast kernel console lines:\n" + lastLines(string(b), n)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(s, "\r", ""), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
