//go:build linux

// Package slurmtest runs a real Slurm for tests: Debian's munged,
// slurmctld and one slurmd per node, all on this host (Slurm's multiple
// slurmd mode: a node name and a port each), as root and without systemd,
// with every file in a temporary directory. Stop tears it all down and
// checks that nothing is left: no daemon, no task, no socket.
package slurmtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// Options shape the cluster; the zero value is two nodes of this host's
// CPUs each, whose steps get no PMI unless srun asks (--mpi=pmi2).
type Options struct {
	Nodes int // 2 if zero
	// CPUs is each node's CPU count (this host's if zero). Steps may
	// oversubscribe it: the partition shares nodes and CPUs.
	CPUs int
	// MpiDefault is slurm.conf's MpiDefault ("none" if empty).
	MpiDefault string
}

// Cluster is a running Slurm.
type Cluster struct {
	Dir   string   // everything Slurm writes is under it
	Conf  string   // slurm.conf
	Nodes []string // node names: n1, n2, …
	ports []int
	procs []*daemon
	t     testing.TB
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts munged, slurmctld and the nodes' slurmd, waits until every
// node is idle, and registers Stop as the test's cleanup. Without root or
// Slurm's programs the test skips (fails under RIVET_REQUIRE_TOOLS=1).
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	testutil.RequireRoot(t)
	for _, p := range [][2]string{{"munged", "munge"}, {"slurmctld", "slurmctld"}, {"slurmd", "slurmd"}, {"srun", "slurm-client"}} {
		testutil.LookTool(t, p[0], p[1])
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.CPUs == 0 {
		o.CPUs = runtime.NumCPU()
	}
	if o.MpiDefault == "" {
		o.MpiDefault = "none"
	}
	dir, err := os.MkdirTemp("", "slurmtest-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), t: t}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	// munged wants its socket's directories searchable by all.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"munge", "state", "spool", "log", "run"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge", "key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if c.ports, err = freePorts(1 + o.Nodes); err != nil {
		t.Fatal(err)
	}
	for i := range o.Nodes {
		c.Nodes = append(c.Nodes, "n"+strconv.Itoa(i+1))
	}
	if err := os.WriteFile(c.Conf, []byte(c.config(o)), 0o644); err != nil {
		t.Fatal(err)
	}
	m := filepath.Join(dir, "munge")
	if err := c.start("munged", "munged", "-F", "--socket="+m+"/socket", "--key-file="+m+"/key",
		"--pid-file="+m+"/pid", "--log-file="+m+"/log", "--seed-file="+m+"/seed"); err != nil {
		t.Fatal(err)
	}
	if err := waitFile(filepath.Join(m, "socket"), 10*time.Second); err != nil {
		t.Fatalf("munged: %v\n%s", err, c.logs())
	}
	if err := c.start("slurmctld", "slurmctld", "-D", "-f", c.Conf); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if err := c.start("slurmd "+n, "slurmd", "-D", "-N", n, "-f", c.Conf); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.waitIdle(60 * time.Second); err != nil {
		t.Fatalf("%v\n%s", err, c.logs())
	}
	return c
}

func (c *Cluster) config(o Options) string {
	d := c.Dir
	var b strings.Builder
	fmt.Fprintf(&b, `# written by internal/slurmtest
ClusterName=rivet
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=%d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[2]s/munge/socket
CredType=cred/munge
MpiDefault=%[3]s
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=600
StateSaveLocation=%[2]s/state
SlurmdSpoolDir=%[2]s/spool/%%n
SlurmctldPidFile=%[2]s/run/slurmctld.pid
SlurmdPidFile=%[2]s/run/slurmd-%%n.pid
SlurmctldLogFile=%[2]s/log/slurmctld.log
SlurmdLogFile=%[2]s/log/slurmd-%%n.log
`, c.ports[0], d, o.MpiDefault)
	for i, n := range c.Nodes {
		fmt.Fprintf(&b, "NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=%d\n", n, c.ports[1+i], o.CPUs)
	}
	fmt.Fprintf(&b, "PartitionName=rivet Nodes=%s Default=YES State=UP OverSubscribe=FORCE:4\n", strings.Join(c.Nodes, ","))
	return b.String()
}

// Env is the environment of Slurm's commands for this cluster: the
// caller's, with SLURM_CONF naming its configuration.
func (c *Cluster) Env(extra ...string) []string {
	env := []string{"SLURM_CONF=" + c.Conf}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "PMI_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Command is a Slurm client command (srun, sbatch, scontrol, …) for this
// cluster, with extra in its environment.
func (c *Cluster) Command(ctx context.Context, extra []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.Env(extra...)
	cmd.Dir = c.Dir
	return cmd
}

// Run runs a Slurm client command and returns its output and exit status
// (-1 if it did not exit).
func (c *Cluster) Run(ctx context.Context, extra []string, name string, args ...string) (stdout, stderr string, status int) {
	var out, errb bytes.Buffer
	cmd := c.Command(ctx, extra, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	status = cmd.ProcessState.ExitCode()
	if err != nil && cmd.ProcessState == nil {
		fmt.Fprintf(&errb, "slurmtest: %v", err)
	}
	return out.String(), errb.String(), status
}

func (c *Cluster) start(name, prog string, args ...string) error {
	log, err := os.Create(filepath.Join(c.Dir, "log", strings.ReplaceAll(name, " ", "-")+".out"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(prog, args...)
	cmd.Env = c.Env()
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("slurmtest: starting %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(d.done) }()
	c.procs = append(c.procs, d)
	return nil
}

// waitIdle waits until sinfo shows every node idle.
func (c *Cluster) waitIdle(limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var last string
	for {
		for _, d := range c.procs {
			select {
			case <-d.done:
				return fmt.Errorf("slurmtest: %s exited: %v", d.name, d.cmd.ProcessState)
			default:
			}
		}
		out, errs, _ := c.Run(ctx, nil, "sinfo", "-h", "-N", "-o", "%N %t")
		last = out + errs
		idle := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "idle" {
				idle++
			}
		}
		if idle == len(c.Nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slurmtest: the nodes are not idle after %v: %s", limit, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop cancels every job, stops the daemons (SIGTERM, then SIGKILL after
// 10 s), removes the directory, and reports whatever is left: a process
// of this cluster (anything with its SLURM_CONF in its environment), a
// port still bound.
func (c *Cluster) Stop() error {
	if c.procs == nil && c.Dir == "" {
		return nil
	}
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.running("slurmctld") {
		c.Run(ctx, nil, "scancel", "--full", "--user=root")
		if err := c.waitNoJobs(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	// The nodes first, then the controller, then munge.
	for i := len(c.procs) - 1; i >= 0; i-- {
		d := c.procs[i]
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("slurmtest: %s did not stop on SIGTERM", d.name))
			syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
	}
	c.procs = nil
	if left := c.leftovers(); len(left) > 0 {
		errs = append(errs, fmt.Errorf("slurmtest: left running: %s", strings.Join(left, "; ")))
	}
	for _, p := range c.ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			errs = append(errs, fmt.Errorf("slurmtest: port %d is still bound: %w", p, err))
			continue
		}
		l.Close()
	}
	if len(errs) > 0 {
		errs = append(errs, errors.New(c.logs()))
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	c.Dir = ""
	return errors.Join(errs...)
}

func (c *Cluster) running(name string) bool {
	for _, d := range c.procs {
		select {
		case <-d.done:
		default:
			if d.name == name {
				return true
			}
		}
	}
	return false
}

func (c *Cluster) waitNoJobs(ctx context.Context) error {
	for {
		out, _, st := c.Run(ctx, nil, "squeue", "-h", "-o", "%i %T")
		if st == 0 && strings.TrimSpace(out) == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slurmtest: jobs still queued: %s", out)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leftovers lists the processes, other than this one, whose environment
// names this cluster's configuration: a daemon, a slurmstepd or a task.
func (c *Cluster) leftovers() []string {
	mark := []byte("SLURM_CONF=" + c.Conf + "\x00")
	var left []string
	// A step's processes may take a moment to be reaped after slurmd stops.
	for deadline := time.Now().Add(5 * time.Second); ; {
		left = left[:0]
		pids, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range pids {
			pid, _ := strconv.Atoi(filepath.Base(p))
			if pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile(p + "/environ")
			if err != nil || !bytes.Contains(env, mark) {
				continue
			}
			comm, _ := os.ReadFile(p + "/comm")
			left = append(left, fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm))))
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logs is the tail of every log, for a failure's message.
func (c *Cluster) logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(c.Dir, "log", "*"))
	files = append(files, filepath.Join(c.Dir, "munge", "log"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(f), strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

// freePorts finds n TCP ports that nothing listens on now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func waitFile(path string, limit time.Duration) error {
	for deadline := time.Now().Add(limit); ; {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear in %v", path, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
