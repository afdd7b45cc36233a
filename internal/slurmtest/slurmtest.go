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
	// Cluster runs Slurm across the nodes of the rxevm cluster this test
	// runs in, on node 1 (RXEVM_NODES): the controller and node1's slurmd
	// here, each other node's slurmd started by NodeMain there, with the
	// configuration and munge key in the cluster's shared directory. Nodes
	// and CPUs are then the cluster's.
	Cluster bool
}

// NodeEnv is the variable that, set in a cluster node's command, makes a
// test binary whose TestMain calls NodeMain that node's part of a Slurm
// cluster.
const NodeEnv = "RIVET_SLURMTEST_NODE"

// In a cluster every node keeps its own files here, and reads the
// shared ones from sharedDir under RXEVM_SHARED.
const (
	nodeDir   = "/tmp/slurmtest"
	sharedDir = "slurm"
)

// Cluster is a running Slurm.
type Cluster struct {
	Dir     string   // everything Slurm writes is under it
	Conf    string   // slurm.conf
	Nodes   []string // node names: n1, n2, …
	ports   []int
	procs   []*daemon
	t       testing.TB
	cluster bool
}

// The ports of a cluster's slurmctld and slurmd: each node is its own
// kernel, so Slurm's own defaults serve.
const (
	clusterCtldPort   = 6817
	clusterSlurmdPort = 6818
)

// localDirs makes the directories a node's daemons write in.
func localDirs(dir string) error {
	// munged wants its socket's directories searchable by all.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"munge", "state", "spool", "log", "run", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil && !os.IsExist(err) {
			return err
		}
	}
	// Each slurmd's spool (SlurmdSpoolDir=…/spool/%n) and temporary
	// directory (TmpFS=…/tmp/%n), for the nodes this may run.
	for i := 1; i <= 8; i++ {
		for _, n := range []string{"n", "node"} {
			for _, d := range []string{"spool", "tmp"} {
				if err := os.MkdirAll(filepath.Join(dir, d, n+strconv.Itoa(i)), 0o755); err != nil {
					return err
				}
			}
		}
	}
	return nil
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
	var dir, conf string
	var err error
	if o.Cluster {
		o.Nodes, _ = strconv.Atoi(os.Getenv("RXEVM_NODES"))
		if os.Getenv("RXEVM_NODE") != "1" || o.Nodes < 2 || os.Getenv("RXEVM_SHARED") == "" {
			t.Fatal("slurmtest: Options.Cluster runs on node 1 of an rxevm cluster")
		}
		dir, conf = nodeDir, filepath.Join(os.Getenv("RXEVM_SHARED"), sharedDir, "slurm.conf")
		err = os.MkdirAll(filepath.Dir(conf), 0o755)
		if err == nil {
			err = os.Mkdir(dir, 0o755)
		}
	} else {
		dir, err = os.MkdirTemp("", "slurmtest-")
		conf = filepath.Join(dir, "slurm.conf")
	}
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Conf: conf, t: t, cluster: o.Cluster}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := localDirs(dir); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge", "key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if o.Cluster {
		c.ports = []int{clusterCtldPort, clusterSlurmdPort}
		c.Nodes = []string{"node1"}
		for i := 2; i <= o.Nodes; i++ {
			c.Nodes = append(c.Nodes, "node"+strconv.Itoa(i))
		}
	} else {
		if c.ports, err = freePorts(1 + o.Nodes); err != nil {
			t.Fatal(err)
		}
		for i := range o.Nodes {
			c.Nodes = append(c.Nodes, "n"+strconv.Itoa(i+1))
		}
	}
	if o.Cluster {
		// The key first: a node starts as soon as it sees the configuration.
		if err := os.WriteFile(filepath.Join(filepath.Dir(conf), "munge.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if o.Cluster {
		if err := cgroupSlice(); err != nil {
			t.Fatal(err)
		}
		// In the VMs cgroup v2 is mounted and there is no systemd: slurmd
		// makes its own scope rather than ask dbus for one.
		if err := os.WriteFile(filepath.Join(filepath.Dir(conf), "cgroup.conf"), []byte("CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"), 0o644); err != nil {
			t.Fatal(err)
		}
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
		t.Fatalf("munged: %v\n%s", err, c.Logs())
	}
	if err := c.start("slurmctld", "slurmctld", "-D", "-f", c.Conf); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if c.cluster && n != "node1" {
			continue // NodeMain starts it there
		}
		if err := c.start("slurmd "+n, "slurmd", "-D", "-N", n, "-f", c.Conf); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitIdle(60 * time.Second); err != nil {
		t.Fatalf("%v\n%s", err, c.Logs())
	}
	return c
}

func (c *Cluster) config(o Options) string {
	d := c.Dir
	var b strings.Builder
	ctld := "localhost(127.0.0.1)"
	if c.cluster {
		// A dead node is marked down 10 s after it stops answering.
		ctld = "node1(192.0.2.1)\nSlurmdPort=" + strconv.Itoa(clusterSlurmdPort) + "\nSlurmdTimeout=10"
	}
	// TmpFS is per node because srun --mpi=pmix's server makes its
	// clients' directory there named for the step alone
	// (spmix_appdir_UID_JOB.STEP): two slurmd on one host sharing /tmp
	// collide, and the second fails the launch ("task 1 launch failed:
	// Unspecified error", its log saying EEXIST).
	fmt.Fprintf(&b, `# written by internal/slurmtest
ClusterName=rivet
SlurmctldHost=`+ctld+`
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
TmpFS=%[2]s/tmp/%%n
SlurmctldPidFile=%[2]s/run/slurmctld.pid
SlurmdPidFile=%[2]s/run/slurmd-%%n.pid
SlurmctldLogFile=%[2]s/log/slurmctld.log
SlurmdLogFile=%[2]s/log/slurmd-%%n.log
`, c.ports[0], d, o.MpiDefault)
	for i, n := range c.Nodes {
		if c.cluster {
			fmt.Fprintf(&b, "NodeName=%s NodeHostname=%[1]s NodeAddr=192.0.2.%d CPUs=1\n", n, i+1)
			continue
		}
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

// WaitIdle waits until sinfo shows every node idle — after a step that
// killed processes, a node may be completing or, if slurmctld lost it
// for SlurmdTimeout, down for a while — or limit passes; its error then
// holds sinfo's states and the reasons Slurm gives (sinfo -R).
func (c *Cluster) WaitIdle(limit time.Duration) error {
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
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			why, whyErr, _ := c.Run(rctx, nil, "sinfo", "-R")
			rcancel()
			return fmt.Errorf("slurmtest: the nodes are not idle after %v: %s\nsinfo -R: %s%s", limit, last, why, whyErr)
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
		errs = append(errs, errors.New(c.Logs()))
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

// Logs is the tail of every log of the cluster's daemons, for a
// failure's message.
func (c *Cluster) Logs() string {
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

// NodeMain is the part of a cluster node other than node 1 (see
// Options.Cluster): it waits for node 1's configuration and key in the
// cluster's shared directory, starts munged and this node's slurmd with
// them, and keeps them running until the VM stops. It never returns.
func NodeMain() {
	shared := filepath.Join(os.Getenv("RXEVM_SHARED"), sharedDir)
	conf := filepath.Join(shared, "slurm.conf")
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "slurmtest: node", os.Getenv("RXEVM_NODE")+":", err)
		os.Exit(1)
	}
	if err := waitFile(conf, 10*time.Minute); err != nil {
		fail(err)
	}
	key, err := os.ReadFile(filepath.Join(shared, "munge.key"))
	if err == nil {
		err = os.MkdirAll(nodeDir, 0o755)
	}
	if err == nil {
		err = localDirs(nodeDir)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(nodeDir, "munge", "key"), key, 0o600)
	}
	if err != nil {
		fail(err)
	}
	if err := cgroupSlice(); err != nil {
		fail(err)
	}
	c := &Cluster{Dir: nodeDir, Conf: conf}
	m := filepath.Join(nodeDir, "munge")
	if err := c.start("munged", "munged", "-F", "--socket="+m+"/socket", "--key-file="+m+"/key",
		"--pid-file="+m+"/pid", "--log-file="+m+"/log", "--seed-file="+m+"/seed"); err != nil {
		fail(err)
	}
	if err := waitFile(filepath.Join(m, "socket"), 30*time.Second); err != nil {
		fail(err)
	}
	name := "node" + os.Getenv("RXEVM_NODE")
	if err := c.start("slurmd "+name, "slurmd", "-D", "-N", name, "-f", conf); err != nil {
		fail(err)
	}
	for _, d := range c.procs {
		<-d.done
		fail(fmt.Errorf("%s exited: %v\n%s", d.name, d.cmd.ProcessState, c.Logs()))
	}
}

// cgroupSlice makes the cgroup slurmd puts its own scope in, which
// systemd makes on a real node.
func cgroupSlice() error {
	return os.MkdirAll("/sys/fs/cgroup/system.slice", 0o755)
}
