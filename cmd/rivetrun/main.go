// Command rivetrun starts N copies of a program on this node and serves
// PMI-2 to them, as MPICH's Hydra mpiexec and Slurm's srun do, so a Rivet
// program takes the same start-up path under any of the three.
//
//	rivetrun -n 4 ./prog args…
//	rivetrun -n 4 -tag-output go test -run TestX ./pkg
//
// Each process gets PMI_FD (a private socketpair: nothing else can join
// the job), PMI_RANK, PMI_SIZE and PMI_JOBID. SIGINT, SIGTERM and SIGHUP
// are forwarded to every process. When a process fails, the others are
// stopped (SIGTERM, then SIGKILL after a grace period), as mpirun does, and
// rivetrun exits with the failed process's status (128+N for signal N).
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/pmi"
)

const usage = `usage: rivetrun -n N [flags] [--] program [args...]

Starts N processes of program on this node, serving PMI-2 to them.

Flags:
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(argv []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rivetrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	n := fs.Int("n", 0, "number of `processes`")
	tag := fs.Bool("tag-output", false, "prefix every output line with [rank]")
	grace := fs.Duration("grace", 3*time.Second, "after a failure, how long the others get to exit on SIGTERM before SIGKILL")
	if err := fs.Parse(argv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *n < 1 || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "rivetrun: need -n N (N ≥ 1) and a program (see -h)")
		return 2
	}
	path, err := exec.LookPath(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "rivetrun: %v\n", err)
		return 127
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	j := &job{n: *n, tag: *tag, grace: *grace, stdout: stdout, stderr: stderr}
	return j.run(ctx, path, fs.Args())
}

type job struct {
	n      int
	tag    bool
	grace  time.Duration
	stdout io.Writer
	stderr io.Writer

	outMu sync.Mutex // whole lines only, from every rank
	procs []*exec.Cmd
}

// exit is how one process ended.
type exit struct {
	rank   int
	status int
	err    error
}

func (j *job) run(ctx context.Context, path string, args []string) int {
	var id [8]byte
	rand.Read(id[:])
	jobid := "rivet-" + hex.EncodeToString(id[:])
	srv := pmi.NewServer(j.n, jobid)
	exits := make(chan exit, j.n)
	var serving sync.WaitGroup
	for r := 0; r < j.n; r++ {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintf(j.stderr, "rivetrun: socketpair: %v\n", err)
			j.stop(syscall.SIGKILL)
			return 1
		}
		ours, theirs := os.NewFile(uintptr(fds[0]), "pmi"), os.NewFile(uintptr(fds[1]), "pmi-child")
		cmd := exec.Command(path, args[1:]...)
		cmd.Args[0] = args[0]
		cmd.ExtraFiles = []*os.File{theirs} // fd 3 in the child
		cmd.Env = append(os.Environ(), "PMI_FD=3", "PMI_RANK="+strconv.Itoa(r),
			"PMI_SIZE="+strconv.Itoa(j.n), "PMI_JOBID="+jobid)
		cmd.Stdin = nil
		// Each rank leads its own process group, so that stopping it stops
		// what it started too (a shell's children hold its output open).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.WaitDelay = 2 * j.grace
		var outDone, errDone func()
		cmd.Stdout, outDone = j.output(r, j.stdout)
		cmd.Stderr, errDone = j.output(r, j.stderr)
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(j.stderr, "rivetrun: starting rank %d: %v\n", r, err)
			theirs.Close()
			ours.Close()
			j.stop(syscall.SIGKILL)
			return 127
		}
		theirs.Close()
		j.procs = append(j.procs, cmd)
		serving.Add(1)
		go func() {
			defer serving.Done()
			srv.Serve(ctx, r, ours)
			ours.Close()
		}()
		go func() {
			err := cmd.Wait()
			outDone() // every line the process wrote is out before its exit is reported
			errDone()
			exits <- exit{rank: r, status: statusOf(cmd, err), err: err}
		}()
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	// status is the first failure's: a forwarded signal, or the first rank
	// to fail; once the job is stopping, later exits do not change it.
	status, stopping := 0, false
	for left := j.n; left > 0; {
		select {
		case s := <-sigs:
			j.stop(s.(syscall.Signal))
			if !stopping {
				stopping, status = true, 128+int(s.(syscall.Signal))
			}
		case e := <-exits:
			left--
			if e.status != 0 && !stopping {
				stopping, status = true, e.status
				fmt.Fprintf(j.stderr, "rivetrun: rank %d %s; stopping the other ranks\n", e.rank, describe(e))
				j.stop(syscall.SIGTERM)
				go func() {
					time.Sleep(j.grace)
					j.stop(syscall.SIGKILL)
				}()
			}
		}
	}
	return status
}

// stop signals every rank's process group; a group that is gone is not
// an error worth reporting.
func (j *job) stop(sig syscall.Signal) {
	for _, p := range j.procs {
		syscall.Kill(-p.Process.Pid, sig)
	}
}

func statusOf(cmd *exec.Cmd, err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}

func describe(e exit) string {
	if e.status > 128 {
		return fmt.Sprintf("was killed by signal %d (%v)", e.status-128, syscall.Signal(e.status-128))
	}
	return fmt.Sprintf("exited with status %d", e.status)
}

// output returns where rank r's stream goes — straight to w, or line by
// line with a "[r] " prefix — and a function that flushes it once the
// process has exited.
func (j *job) output(r int, w io.Writer) (io.Writer, func()) {
	if !j.tag {
		return &lockedWriter{mu: &j.outMu, w: w}, func() {}
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			j.outMu.Lock()
			fmt.Fprintf(w, "[%d] %s\n", r, sc.Text())
			j.outMu.Unlock()
		}
		io.Copy(io.Discard, pr) // a line too long to scan: drop the rest, never block the process
	}()
	return pw, func() { pw.Close(); <-done }
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
