//go:build linux

package vm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A cluster is Topology "cluster:n": n qemu processes, each a node with
// its own kernel, whose virtio NICs are unix datagram sockets into a
// switch in this process. The switch forwards Ethernet frames by the
// nodes' fixed MAC addresses and can partition them; node 1's runner
// control port (ttyS3, RXEVM_CONTROL in the guest) takes the faults:
// kill, stop and continue a node's qemu, drop its NIC's carrier, split
// the switch. See docs/rxevm.md.

// qemuNode is one node's qemu.
type qemuNode struct {
	i    int
	cmd  *exec.Cmd
	qmp  string // QMP socket
	done chan struct{}
	err  error // from Wait, once done is closed
}

// startQEMU starts qemu on a goroutine locked to its thread (Pdeathsig
// fires when that thread exits) and returns once it runs.
func startQEMU(ctx context.Context, qemu string, args []string, out io.Writer, i int) (*qemuNode, error) {
	n := &qemuNode{i: i, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.CommandContext(ctx, qemu, args...)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			started <- err
			close(n.done)
			return
		}
		n.cmd = cmd
		started <- nil
		n.err = cmd.Wait()
		close(n.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting qemu for %s: %w", NodeName(i), err)
	}
	return n, nil
}

func (n *qemuNode) signal(sig syscall.Signal) error {
	select {
	case <-n.done:
		return fmt.Errorf("%s is not running", NodeName(n.i))
	default:
	}
	return n.cmd.Process.Signal(sig)
}

// bootCluster runs a cluster once, as boot runs one VM.
func bootCluster(ctx, runCtx context.Context, cfg Config, qemu string, k Kernel, initrd string, accel Accel, res *Result) error {
	nodes := cfg.Topology.Nodes()
	runDir, err := os.MkdirTemp("", "rxevm-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(runDir)
	shared := filepath.Join(runDir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		return err
	}
	sw, err := newSwitch(runDir, nodes)
	if err != nil {
		return err
	}
	defer sw.close()
	if cfg.CPUs <= 0 {
		cfg.CPUs = 1
	}
	if cfg.Memory == "" {
		cfg.Memory = "1G"
	}
	qctx, stopQEMU := context.WithCancel(runCtx)
	defer stopQEMU()
	var copies sync.WaitGroup
	var qemuOut bytes.Buffer
	qemuOutW := &lockedWriter{w: &qemuOut}
	tagged := &lockedWriter{w: cfg.Stderr}
	c := &cluster{sw: sw}
	var shares, consoles []string
	var noStart atomic.Bool
	kill := &hangKill{stop: stopQEMU}
	for i := 1; i <= nodes; i++ {
		dir := filepath.Join(runDir, NodeName(i))
		share := filepath.Join(dir, "share")
		if err := os.MkdirAll(share, 0o755); err != nil {
			return err
		}
		if err := installAgent(share); err != nil {
			return err
		}
		sp := spec{Args: cfg.Args, Env: cfg.Env, Dir: cfg.Dir, Topology: cfg.Topology, Quiet: cfg.Quiet, Node: i}
		stdout, stderr := cfg.Stdout, cfg.Stderr
		if i > 1 {
			sp.Args = cfg.NodeArgs
			prefix := "[" + NodeName(i) + "] "
			stdout, stderr = &prefixWriter{w: tagged, prefix: prefix}, &prefixWriter{w: tagged, prefix: prefix}
		}
		b, _ := json.Marshal(sp)
		if err := os.WriteFile(filepath.Join(share, "spec.json"), b, 0o644); err != nil {
			return err
		}
		outSock, err := streamSocket(filepath.Join(dir, "out.sock"), stdout, &copies)
		if err != nil {
			return err
		}
		defer outSock.Close()
		errSock, err := streamSocket(filepath.Join(dir, "err.sock"), stderr, &copies)
		if err != nil {
			return err
		}
		defer errSock.Close()
		console := filepath.Join(dir, "console.log")
		args := qemuArgs(cfg, accel, k, initrd, share, console, "")
		qmp := filepath.Join(dir, "qmp.sock")
		args = append(args,
			"-chardev", "socket,id=out,path="+filepath.Join(dir, "out.sock"),
			"-chardev", "socket,id=err,path="+filepath.Join(dir, "err.sock"),
			"-serial", "chardev:out", "-serial", "chardev:err",
			"-netdev", fmt.Sprintf("dgram,id=net0,local.type=unix,local.path=%s,remote.type=unix,remote.path=%s", sw.nodePath(i), sw.portPath(i)),
			"-device", "virtio-net-pci,netdev=net0,mac="+nodeMAC(i).String(),
			"-qmp", "unix:"+qmp+",server=on,wait=off",
			"-virtfs", "local,path="+shared+",mount_tag="+clusterTag+",security_model=none,multidevs=remap")
		if i == 1 {
			ctl, err := c.listenControl(filepath.Join(dir, "ctl.sock"))
			if err != nil {
				return err
			}
			defer ctl.Close()
			args = append(args, "-chardev", "socket,id=ctl,path="+filepath.Join(dir, "ctl.sock"), "-serial", "chardev:ctl")
		}
		n, err := startQEMU(qctx, qemu, args, &prefixWriter{w: qemuOutW, prefix: NodeName(i) + ": "}, i)
		if err != nil {
			return err
		}
		n.qmp = qmp
		c.nodes = append(c.nodes, n)
		shares, consoles = append(shares, share), append(consoles, console)
		if cfg.StartTimeout > 0 {
			go watchStart(qctx, filepath.Join(share, startedFile), cfg.StartTimeout, func() {
				noStart.Store(true)
				kill.hung(NodeName(i), qmp, console, 0)
			})
		}
	}
	head := c.nodes[0]
	select {
	case <-head.done:
	case <-qctx.Done():
	}
	// Node 1's command is over: the others go with it.
	stopQEMU()
	for _, n := range c.nodes {
		n.cmd.Process.Signal(syscall.SIGCONT)
		<-n.done
	}
	copies.Wait()
	res.Dropped = sw.dropped.Load()

	st, stErr := readStatus(shares[0])
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
		return fmt.Errorf("%w within %v: the cluster was killed%s%s", ErrNoStart, cfg.StartTimeout, clusterConsoles(shares, consoles), kill.result())
	case runCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		return fmt.Errorf("%w after %v: the cluster was killed%s", ErrTimeout, cfg.Timeout, consoleTail(consoles[0], 20))
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	why := "node1's qemu exited"
	if head.err != nil {
		why = "node1's qemu: " + head.err.Error()
	}
	if msg, err := os.ReadFile(filepath.Join(shares[0], "init-error")); err == nil {
		why = strings.TrimSpace(string(msg))
	}
	if q := strings.TrimSpace(qemuOut.String()); q != "" {
		why += ": " + lastLines(q, 3)
	}
	return fmt.Errorf("%w (%s)%s", ErrNoStatus, why, consoleTail(consoles[0], 15))
}

// clusterConsoles is the console tail of every node that did not start.
func clusterConsoles(shares, consoles []string) string {
	var b strings.Builder
	for i, s := range shares {
		if !started(s) {
			fmt.Fprintf(&b, "\n%s did not start:%s", NodeName(i+1), consoleTail(consoles[i], 10))
		}
	}
	return b.String()
}

// cluster is what the control port acts on.
type cluster struct {
	nodes []*qemuNode
	sw    *vswitch
}

// node returns node i's qemu for a fault: never node 1, whose command
// is the run.
func (c *cluster) node(arg string) (*qemuNode, error) {
	i, err := strconv.Atoi(arg)
	if err != nil || i < 2 || i > len(c.nodes) {
		return nil, fmt.Errorf("no node %q to fault: 2 to %d", arg, len(c.nodes))
	}
	return c.nodes[i-1], nil
}

// killWait bounds how long "kill N" waits for node N's qemu to be reaped
// (-fault waits a minute for the answer).
const killWait = 30 * time.Second

// do carries out one control line and returns what to answer.
func (c *cluster) do(line string) error {
	f := strings.Fields(line)
	if len(f) == 0 {
		return errors.New("empty command")
	}
	switch {
	case len(f) == 2 && (f[0] == "kill" || f[0] == "stop" || f[0] == "cont"):
		n, err := c.node(f[1])
		if err != nil {
			return err
		}
		sig := map[string]syscall.Signal{"kill": syscall.SIGKILL, "stop": syscall.SIGSTOP, "cont": syscall.SIGCONT}[f[0]]
		if err := n.signal(sig); err != nil || sig != syscall.SIGKILL {
			return err
		}
		// Answered once qemu is reaped, so that the node is gone — a
		// command for it fails as not running — when -fault returns: on
		// a loaded host a "stop" right after found it still there.
		select {
		case <-n.done:
			return nil
		case <-time.After(killWait):
			return fmt.Errorf("%s did not exit within %v of SIGKILL", NodeName(n.i), killWait)
		}
	case len(f) == 3 && f[0] == "link" && (f[2] == "up" || f[2] == "down"):
		n, err := c.node(f[1])
		if err != nil {
			return err
		}
		return setLink(n.qmp, f[2] == "up")
	case f[0] == "partition" && len(f) >= 3:
		return c.sw.partition(f[1:])
	case len(f) == 1 && f[0] == "heal":
		c.sw.heal()
		return nil
	}
	return fmt.Errorf("unknown command %q (kill N, stop N, cont N, link N up|down, partition A B…, heal)", line)
}

// listenControl serves node 1's control port: a line per command, a line
// per answer ("ok" or "error: …").
func (c *cluster) listenControl(path string) (net.Listener, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			answer := "ok\n"
			if err := c.do(line); err != nil {
				answer = "error: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
			}
			if _, err := io.WriteString(conn, answer); err != nil {
				return
			}
		}
	}()
	return l, nil
}

// setLink sets the carrier of a node's NIC through QMP, as a cable pulled
// or plugged: the guest sees the link go down or up.
func setLink(sock string, up bool) error {
	q, err := dialQMP(sock, time.Now().Add(10*time.Second))
	if err != nil {
		return err
	}
	defer q.Close()
	_, err = q.execute("set_link", map[string]any{"name": "net0", "up": up})
	return err
}

// lockedWriter serializes writes from several nodes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixWriter starts every line with prefix, writing whole lines.
type prefixWriter struct {
	w       io.Writer
	prefix  string
	partial []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		line := append([]byte(p.prefix), p.partial[:i+1]...)
		p.partial = p.partial[i+1:]
		if _, err := p.w.Write(line); err != nil {
			return len(b), err
		}
	}
	return len(b), nil
}
