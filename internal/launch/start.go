//go:build linux

package launch

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/pmi"
)

// start starts the process of universe rank u — rank r of the job srv
// serves — running path with args (args[0] its name), and reports its
// exit on j.exits. It returns 0, or the job's status if it could not.
func (j *job) start(u, r int, path string, args []string, srv *pmi.Server, env ...string) int {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		j.logf("rivetrun: socketpair: %v\n", err)
		return 1
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "pmi"), os.NewFile(uintptr(fds[1]), "pmi-child")
	cmd := exec.Command(path, args[1:]...)
	cmd.Args[0] = args[0]
	cmd.ExtraFiles = []*os.File{theirs} // fd 3 in the child
	cmd.Env = append(os.Environ(), j.Env...)
	cmd.Env = append(cmd.Env, "PMI_FD=3", "PMI_RANK="+strconv.Itoa(r),
		"PMI_SIZE="+strconv.Itoa(srv.Size), "PMI_JOBID="+srv.JobID)
	cmd.Env = append(cmd.Env, env...)
	var ftChild, ftOurs *os.File
	// Ranks tune their process for busy polling (fabric's
	// WithProcessTuning) unless the environment says otherwise.
	if !slices.ContainsFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, TuneEnv+"=") }) {
		cmd.Env = append(cmd.Env, TuneEnv+"=1")
	}
	if j.FT {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			// Ours through the poller: writes take a deadline, and the
			// reader below ends when the socket is closed.
			err = unix.SetNonblock(fds[0], true)
		}
		if err != nil {
			j.logf("rivetrun: socketpair: %v\n", err)
			ours.Close()
			theirs.Close()
			return 1
		}
		ftChild = os.NewFile(uintptr(fds[1]), "ft-child")
		ftOurs = os.NewFile(uintptr(fds[0]), "ft")
		cmd.ExtraFiles = append(cmd.ExtraFiles, ftChild) // fd 4
		cmd.Env = append(cmd.Env, FTEnv+"="+strconv.Itoa(FTFD))
	}
	cmd.Stdin = nil
	// Each rank leads its own process group, so that stopping it stops
	// what it started too (a shell's children hold its output open).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * j.Grace
	var outDone, errDone func()
	cmd.Stdout, outDone = j.output(u, j.Stdout)
	cmd.Stderr, errDone = j.output(u, j.Stderr)
	j.ftMu.Lock()
	for len(j.procs) <= u {
		j.procs = append(j.procs, nil)
		j.ft = append(j.ft, nil)
	}
	if j.Bind.pins(j.N) {
		err = startOn(cmd, u%runtime.NumCPU())
	} else {
		err = cmd.Start()
	}
	theirs.Close()
	if ftChild != nil {
		ftChild.Close()
	}
	if err != nil {
		j.ftMu.Unlock()
		j.logf("rivetrun: starting rank %d: %v\n", u, err)
		ours.Close()
		if ftOurs != nil {
			ftOurs.Close()
		}
		outDone()
		errDone()
		return 127
	}
	j.procs[u] = cmd
	j.ft[u] = ftOurs
	j.ftMu.Unlock()
	if ftOurs != nil {
		go readVerdicts(j.ctx, u, ftOurs, j.verdicts)
	}
	go func() {
		srv.Serve(j.ctx, r, ours)
		ours.Close()
	}()
	go func() {
		err := cmd.Wait()
		at := time.Now()
		outDone() // every line the process wrote is out before its exit is reported
		errDone()
		j.exits <- exit{rank: u, status: statusOf(cmd, err), err: err, at: at}
	}()
	return 0
}
