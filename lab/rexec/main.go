// Command rexec runs shell commands on another node of an rxevm cluster,
// as ssh would: what lab scripts start on node 2 from node 1 — perftest's
// and rivet perf's servers, Rivet's second rank — and the agent Open
// MPI's mpirun launches its daemons with (`--mca plm_rsh_agent rexec`).
// The cluster has no sshd and needs none of its keys and accounts: the
// nodes exist only inside one rxevm run.
//
//	rexec -listen :7022            # on the node that runs the commands
//	rexec [-p PORT] [-w WAIT] HOST WORD…  # WORDs joined by spaces, run by /bin/sh on HOST
//
// The client prints the command's stdout and stderr on its own and exits
// with its status (128+N when signal N ended it; 255 when the command
// could not be run). When the client goes — ended, killed, or its
// connection lost — the command's whole process group is killed.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// On the wire: the client sends the command (a big-endian uint32 length,
// then the bytes); the server answers with frames, a kind byte and a
// big-endian uint32 length before the bytes: output on stdout or stderr,
// and last the exit status (4 bytes).
const (
	frameStdout = 'o'
	frameStderr = 'e'
	frameExit   = 'x'
)

const maxCommand = 1 << 20

func main() {
	listen := flag.String("listen", "", "serve on `ADDR` (host:port) instead of running a command")
	port := flag.Int("p", 7022, "the server's `port`")
	wait := flag.Duration("w", time.Minute, "keep trying to connect for this `long` (a node still booting, an address not yet resolved)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: rexec -listen ADDR | rexec [-p PORT] [-w WAIT] HOST COMMAND…\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *listen != "" {
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rexec:", err)
			os.Exit(255)
		}
		serve(l)
		return
	}
	if flag.NArg() < 2 {
		flag.Usage()
		os.Exit(255)
	}
	conn, err := dial(net.JoinHostPort(flag.Arg(0), strconv.Itoa(*port)), *wait)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rexec:", err)
		os.Exit(255)
	}
	// A signal ends the client, and with its connection the command.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() { <-sig; conn.Close(); os.Exit(255) }()
	status, err := run(conn, strings.Join(flag.Args()[1:], " "), os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rexec:", err)
	}
	os.Exit(status)
}

// dial connects to addr, trying again until it succeeds or wait has
// passed: under emulation a node's first ARP answer can take seconds
// (one launch found "no route to host" and its job waited for it).
func dial(addr string, wait time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(wait)
	for {
		conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err == nil || time.Now().After(deadline) {
			return conn, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// run sends command over conn, copies its output to stdout and stderr
// and returns its exit status.
func run(conn net.Conn, command string, stdout, stderr io.Writer) (int, error) {
	defer conn.Close()
	if len(command) > maxCommand {
		return 255, fmt.Errorf("a command of %d bytes (at most %d)", len(command), maxCommand)
	}
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(command)))
	if _, err := conn.Write(append(msg, command...)); err != nil {
		return 255, err
	}
	r := bufio.NewReader(conn)
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return 255, fmt.Errorf("the server hung up before the command's status: %w", err)
		}
		n := int64(binary.BigEndian.Uint32(hdr[1:]))
		switch hdr[0] {
		case frameStdout, frameStderr:
			w := stdout
			if hdr[0] == frameStderr {
				w = stderr
			}
			if _, err := io.CopyN(w, r, n); err != nil {
				return 255, err
			}
		case frameExit:
			var b [4]byte
			if n != 4 {
				return 255, fmt.Errorf("an exit frame of %d bytes", n)
			}
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return 255, err
			}
			return int(int32(binary.BigEndian.Uint32(b[:]))), nil
		default:
			return 255, fmt.Errorf("a frame of kind %q", hdr[0])
		}
	}
}

// serve runs each connection's command until l is closed.
func serve(l net.Listener) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go handle(conn)
	}
}

// handle runs one connection's command in a process group of its own,
// killed whole if the connection ends first.
func handle(conn net.Conn) {
	defer conn.Close()
	var n [4]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		return
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxCommand {
		return
	}
	command := make([]byte, size)
	if _, err := io.ReadFull(conn, command); err != nil {
		return
	}
	out := &frameWriter{conn: conn}
	cmd := exec.Command("/bin/sh", "-c", string(command))
	cmd.Stdout, cmd.Stderr = out.kind(frameStdout), out.kind(frameStderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	status := 255
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(out.kind(frameStderr), "rexec: %v\n", err)
	} else {
		// The client sends nothing more: a read ends only when it goes.
		gone := make(chan struct{})
		go func() {
			io.Copy(io.Discard, conn)
			close(gone)
		}()
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		var err error
		select {
		case err = <-waited:
		case <-gone:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-waited
			return
		}
		status = exitStatus(err)
	}
	out.write(frameExit, binary.BigEndian.AppendUint32(nil, uint32(status)))
}

// exitStatus is a shell's status for how a command ended.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 255
}

// frameWriter sends a command's output as frames, one writer at a time.
type frameWriter struct {
	mu   sync.Mutex
	conn net.Conn
}

func (f *frameWriter) write(kind byte, p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hdr := binary.BigEndian.AppendUint32([]byte{kind}, uint32(len(p)))
	if _, err := f.conn.Write(append(hdr, p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (f *frameWriter) kind(k byte) io.Writer { return kindWriter{f, k} }

type kindWriter struct {
	f *frameWriter
	k byte
}

func (w kindWriter) Write(p []byte) (int, error) { return w.f.write(w.k, p) }
