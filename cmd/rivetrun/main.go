//go:build linux

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
//
// With -bind-to core (the default when there are no more ranks than CPUs)
// rank r is pinned to CPU r mod NumCPU, as mpirun's --bind-to core does.
//
// With -ft the job keeps running when a process dies: each live process
// reads "failed rank=R status=S time=UNIXNANO" lines on fd 4 (named by
// RIVET_FT_FD), which the fabric turns into per-peer failure knowledge.
// On the same socket a process writes "declared rank=R" when it declared
// rank R failed (its detector convicted it, or a peer told it so); a
// rank declared failed that has not exited -fence-grace later — hung,
// stopped, or cut off from the peers that would end it — is killed.
// rivetrun then exits with the first failed process's status once all
// have exited.
//
// A process may spawn more (PMI-2's spawn: fabric.Spawn, MPI_Comm_spawn):
// they start on this node as a job of their own, numbered after every
// process started so far, under the same flags, and rivetrun waits for
// them too. -universe U tells the processes the universe size
// (MPI_UNIVERSE_SIZE): how many processes the job expects to grow to,
// for which the fabric sets shared memory aside from the start.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rivet-hpc/rivet/internal/launch"
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
	ft := fs.Bool("ft", false, "keep the job running when a rank dies, and tell the others (fd 4, RIVET_FT_FD)")
	expect := fs.Bool("expect-failures", false, "with -ft, exit 0 when every rank that did not fail (killed, or declared failed: status 99) exited 0")
	bind := fs.String("bind-to", "auto", "pin rank r to CPU r mod NumCPU: `core`, none, or auto (core when N ≤ CPUs)")
	grace := fs.Duration("grace", 3*time.Second, "after a failure, how long the others get to exit on SIGTERM before SIGKILL")
	fenceGrace := fs.Duration("fence-grace", time.Second, "with -ft, how long a rank declared failed gets to exit by itself before SIGKILL")
	universe := fs.Int("universe", 0, "the universe `size` the processes are told: how many the job may grow to by spawning (0: N)")
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
	if *expect && !*ft {
		fmt.Fprintln(stderr, "rivetrun: -expect-failures needs -ft")
		return 2
	}
	if *universe != 0 && *universe < *n {
		fmt.Fprintf(stderr, "rivetrun: -universe %d is smaller than -n %d\n", *universe, *n)
		return 2
	}
	binding, err := launch.ParseBinding(*bind)
	if err != nil {
		fmt.Fprintf(stderr, "rivetrun: %v\n", err)
		return 2
	}
	return launch.Run(context.Background(), launch.Options{N: *n, Tag: *tag, Grace: *grace, FT: *ft, ExpectFailures: *expect, FenceGrace: *fenceGrace, Bind: binding, Universe: *universe,
		Stdout: stdout, Stderr: stderr}, fs.Args())
}
