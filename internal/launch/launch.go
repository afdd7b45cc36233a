//go:build linux

// Package launch starts the processes of a job on this node and serves
// PMI-2 to them. It is the engine of cmd/rivetrun, and tests use it to run
// multi-process programs without building rivetrun first.
package launch

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rivet-hpc/rivet/fabric/bootstrap"
	"github.com/rivet-hpc/rivet/internal/pmi"
)

// FTFD is the file descriptor on which, under Options.FT, each process
// reads the launcher's failure notices and writes its verdicts; FTEnv
// names it in the environment.
const (
	FTFD  = 4
	FTEnv = "RIVET_FT_FD"
)

// ExitDeclaredFailed is the status of a process that ends because its
// peers declared it failed (fabric.ExitDeclaredFailed): a process
// failure, as a signal is, under Options.ExpectFailures.
const ExitDeclaredFailed = 99

// TuneEnv turns on the fabric's process tuning in each rank (fabric's
// WithProcessTuning); Run sets it to 1 unless the environment has it.
const TuneEnv = "RIVET_TUNE_PROCESS"

// Options describe a job.
type Options struct {
	N     int           // number of processes
	Tag   bool          // prefix every output line with "[rank] "
	Grace time.Duration // after a failure, time given to SIGTERM before SIGKILL
	FT    bool          // keep running when a rank dies and tell the others
	// ExpectFailures (with FT) makes the job's status the survivors':
	// 0 when every rank that did not fail exited 0. A rank fails when a
	// signal ends it or it ends with ExitDeclaredFailed (its peers
	// declared it failed); a rank that exits with any other non-zero
	// status still fails the job, as does a job with no survivor.
	ExpectFailures bool
	// FenceGrace is, under FT, how long a rank another rank declared
	// failed has to exit by itself (its fabric ends it with status 99 as
	// soon as it runs) before the launcher SIGKILLs it; 1 s if zero.
	FenceGrace time.Duration
	// Bind says whether rank r is pinned to CPU r mod NumCPU from its
	// first instruction, as mpirun's --bind-to core does: the Go runtime
	// then starts with GOMAXPROCS 1 and every thread it makes stays on
	// that CPU. The zero value, BindAuto, pins when the ranks fit the
	// CPUs: every caller launches the same way unless it says otherwise.
	Bind Binding
	// Universe is the universe size the processes are told (PMI-2's
	// universeSize, MPI_UNIVERSE_SIZE): how many processes the job may
	// usefully grow to by spawning. 0: not told.
	Universe int
	// Lookups, if set, counts the PMI gets the job's processes make.
	Lookups *atomic.Int64
	Env     []string // added to os.Environ() for every process
	Stdout  io.Writer
	Stderr  io.Writer
}

// Run starts N processes of argv[0] (looked up in PATH) with argv[1:],
// waits for them and returns the job's exit status: 0, the first failed
// process's status (128+N for signal N), or the status for a forwarded
// signal. Without FT, the first failure stops the other processes, as
// mpirun does. With FT, the others keep running and each live process
// reads "failed rank=R status=S time=UNIXNANO" lines on fd FTFD, a
// socket on which it writes "declared rank=R" when it has declared rank R
// failed: once most of the other ranks have (see court), the launcher
// makes the verdict final, killing R if it has not exited within
// FenceGrace (a hung or cut-off process cannot end itself).
func Run(ctx context.Context, o Options, argv []string) int {
	if o.Grace == 0 {
		o.Grace = 3 * time.Second
	}
	if o.FenceGrace == 0 {
		o.FenceGrace = time.Second
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.N < 1 || len(argv) == 0 {
		fmt.Fprintln(o.Stderr, "rivetrun: need N ≥ 1 and a program")
		return 2
	}
	if err := bootstrap.InJob(); err != nil {
		// One of several processes another launcher started: each would
		// launch a job of its own.
		fmt.Fprintf(o.Stderr, "rivetrun: %v\n", err)
		return 2
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(o.Stderr, "rivetrun: %v\n", err)
		return 127
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	j := &job{Options: o}
	return j.run(ctx, path, argv)
}

// signalGroup sends sig to the process group pgid leads (a variable so
// that tests can play a process SIGKILL does not end).
var signalGroup = func(pgid int, sig syscall.Signal) error { return syscall.Kill(-pgid, sig) }

// killWait is how long a job waits for its processes to exit after
// SIGKILL before it gives up on them.
var killWait = 30 * time.Second

type job struct {
	Options
	outMu sync.Mutex // whole lines only, from every rank
	jobid string
	ctx   context.Context

	ftMu   sync.Mutex
	procs  []*exec.Cmd // per rank (spawned processes after the job's own)
	ft     []*os.File  // per rank: its notice socket; nil once it exited
	spawns int         // spawns served

	exits    chan exit
	verdicts chan verdict
	// added takes the count of processes a spawn will start; the main
	// loop answers once it is ready for their exits.
	added chan int
}

// verdict is rank by's word that rank rank failed.
type verdict struct{ by, rank int }

// exit is how one process ended.
type exit struct {
	rank   int
	status int
	err    error
	at     time.Time
	// never: a spawned process that could not be started (its spawn
	// failed at the spawner): not a survivor, nor a failure of the job.
	never bool
}

// newJobID returns a fresh job id; shared-memory segments carry it in their
// names so a launcher can find what a job left behind.
func newJobID() string {
	var id [8]byte
	rand.Read(id[:])
	return "rivet-" + hex.EncodeToString(id[:])
}

func (j *job) run(ctx context.Context, path string, args []string) int {
	// Signals are caught before the first rank starts: one that arrives
	// while ranks start is forwarded once they have, not lost.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	j.jobid = newJobID()
	srv := pmi.NewServer(j.N, j.jobid)
	srv.Universe = j.Universe
	srv.Lookups = j.Lookups
	srv.Spawn = j.spawn
	j.exits = make(chan exit, j.N)
	j.verdicts = make(chan verdict, j.N)
	j.added = make(chan int)
	j.ctx = ctx
	defer func() {
		j.ftMu.Lock()
		for _, f := range j.ft {
			if f != nil {
				f.Close()
			}
		}
		j.ftMu.Unlock()
		sweepSegments(j.jobid)
	}()
	for r := 0; r < j.N; r++ {
		if st := j.start(r, r, path, args, srv); st != 0 {
			j.stop(syscall.SIGKILL)
			return st
		}
	}
	exits, verdicts := j.exits, j.verdicts

	// status is the first failure's: a forwarded signal, or the first rank
	// to fail; once the job is stopping, later exits do not change it.
	// Under ExpectFailures a process failure goes to failed instead, and
	// survived counts the ranks that exited 0.
	status, stopping := 0, false
	failed, survived := 0, 0
	// A process that SIGKILL does not end is stuck in the kernel; after
	// killWait the job returns without it rather than hang its caller.
	ctxDone, killNow := ctx.Done(), make(chan struct{}, 1)
	var stuck <-chan time.Time
	exited := make([]bool, j.N)
	judge := newCourt(j.N)
	fenceDue := make(chan int, 1024)
	condemn := func(ranks []int) {
		for _, r := range ranks {
			time.AfterFunc(j.FenceGrace, func() { fenceDue <- r })
		}
	}
	for left := j.N; left > 0; {
		select {
		case k := <-j.added:
			// Processes a spawn is about to start (their ranks follow).
			left += k
			exited = append(exited, make([]bool, k)...)
			judge.grow(len(exited))
			j.added <- 0 // the spawn may start them now
		case v := <-verdicts:
			if !stopping {
				condemn(judge.declare(v.by, v.rank))
			}
		case r := <-fenceDue:
			if !exited[r] && !stopping {
				j.logf("rivetrun: rank %d, declared failed by the other ranks, has not exited %v later; killing it (-ft)\n", r, j.FenceGrace)
				signalGroup(j.proc(r).Process.Pid, syscall.SIGKILL)
			}
		case s := <-sigs:
			j.stop(s.(syscall.Signal))
			if !stopping {
				stopping, status = true, 128+int(s.(syscall.Signal))
			}
		case <-ctxDone:
			ctxDone = nil
			if !stopping {
				stopping, status = true, 128+int(syscall.SIGKILL)
			}
			select {
			case killNow <- struct{}{}:
			default: // a kill is already due
			}
		case <-killNow:
			j.stop(syscall.SIGKILL)
			if stuck == nil {
				stuck = time.After(killWait)
			}
		case <-stuck:
			for r, ok := range exited {
				if !ok {
					j.logf("rivetrun: rank %d has not exited %v after SIGKILL (stuck in the kernel?); giving up on it\n", r, killWait)
				}
			}
			if status == 0 {
				status = 128 + int(syscall.SIGKILL)
			}
			return status
		case e := <-exits:
			left--
			exited[e.rank] = true
			j.exited(e)
			if j.FT && !stopping {
				condemn(judge.exit(e.rank))
			}
			if e.never {
				continue // the spawn's error says so, at the spawner
			}
			if e.status == 0 {
				survived++
			}
			if e.status == 0 || stopping {
				continue
			}
			if j.FT {
				switch {
				case j.ExpectFailures && (e.status > 128 || e.status == ExitDeclaredFailed):
					if failed == 0 {
						failed = e.status
					}
				case status == 0:
					status = e.status
				}
				j.logf("rivetrun: rank %d %s; the others go on (-ft)\n", e.rank, describe(e))
				continue
			}
			stopping, status = true, e.status
			j.logf("rivetrun: rank %d %s; stopping the other ranks\n", e.rank, describe(e))
			j.stop(syscall.SIGTERM)
			go func() {
				time.Sleep(j.Grace)
				select {
				case killNow <- struct{}{}:
				default:
				}
			}()
		}
	}
	if status == 0 && survived == 0 {
		status = failed // nobody survived the expected failures
	}
	return status
}

// readVerdicts passes on rank by's "declared rank=R" lines until its
// socket closes.
func readVerdicts(ctx context.Context, by int, f *os.File, out chan<- verdict) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "declared rank=")
		r, err := strconv.Atoi(v)
		if !ok || err != nil || r < 0 || r == by {
			continue
		}
		select {
		case out <- verdict{by, r}:
		case <-ctx.Done():
			return
		}
	}
}

// exited closes rank e's notice socket and, if it failed, tells every
// other live rank. A write to a rank that stopped reading is dropped: the
// socket is non-blocking for us, so a stuck rank never stalls the launcher.
func (j *job) exited(e exit) {
	if !j.FT {
		return
	}
	j.ftMu.Lock()
	defer j.ftMu.Unlock()
	if f := j.ft[e.rank]; f != nil {
		f.Close()
		j.ft[e.rank] = nil
	}
	if e.status == 0 {
		return
	}
	line := fmt.Sprintf("failed rank=%d status=%d time=%d\n", e.rank, e.status, e.at.UnixNano())
	for _, f := range j.ft {
		if f != nil {
			f.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			f.WriteString(line)
		}
	}
}

// sweepSegments removes the shared-memory files a job's processes left
// behind: the fabric unlinks its segments once every peer has mapped
// them, so only a process that died during start-up leaves one.
func sweepSegments(jobid string) {
	names, _ := filepath.Glob(filepath.Join("/dev/shm", jobid+"-*"))
	for _, n := range names {
		if strings.HasPrefix(filepath.Base(n), jobid+"-") {
			os.Remove(n)
		}
	}
}

// stop signals every rank's process group; a group that is gone is not
// an error worth reporting.
func (j *job) stop(sig syscall.Signal) {
	j.ftMu.Lock()
	procs := slices.Clone(j.procs)
	j.ftMu.Unlock()
	for _, p := range procs {
		if p != nil && p.Process != nil {
			signalGroup(p.Process.Pid, sig)
		}
	}
}

// proc is rank r's command.
func (j *job) proc(r int) *exec.Cmd {
	j.ftMu.Lock()
	defer j.ftMu.Unlock()
	return j.procs[r]
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
	if f, ok := w.(*os.File); ok && !j.Tag {
		// The process writes to the file itself: a terminal stays one
		// for it (progress lines show), with no copy in between.
		return f, func() {}
	}
	if !j.Tag {
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

// logf writes one launcher message, between whole lines of the ranks'.
func (j *job) logf(format string, args ...any) {
	j.outMu.Lock()
	defer j.outMu.Unlock()
	fmt.Fprintf(j.Stderr, format, args...)
}
