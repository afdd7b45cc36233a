//go:build linux

// Command rivet is Rivet's command-line tool: it shows RDMA devices, manages
// soft-RoCE links, watches link and port events, and runs perftest-style
// and OSU-style benchmarks.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rivet-hpc/rivet/internal/godebug"
)

const usage = `usage: rivet <command> [arguments]

Commands:
  devices [-json]          list RDMA devices, ports and GIDs (like ibv_devinfo -v)
  rxe add NAME NETDEV      create a soft-RoCE device on a netdev (root)
  rxe del NAME             delete a soft-RoCE device (root)
  events [-json]           print link and port events until interrupted
  perf <test> [flags] [server]
                           perftest-style latency and bandwidth tests:
                           write_lat read_lat atomic_lat send_lat write_bw read_bw
  bench [-np N] [-format text|json|csv] [test] [OSU options]
                           OSU Micro-Benchmarks (osu_latency osu_bw osu_bibw)
                           over the fabric; launches N=2 ranks if run alone
  fault <loss|show|clear> -dev NETDEV [-peer ADDR] [-percent P]
                           drop RoCE packets on a netdev with eBPF (root)
  plot [-o FILE] [-label A,B] [FILE...]
                           draw benchmark results (rivet bench, OSU, perftest,
                           -format json/csv) as SVG or PNG curves

Run "rivet <command> -h" for a command's flags.
`

func main() {
	if env, ok := benchmarkEnv(os.Args[1:], os.Environ()); ok {
		reexec(env)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// benchmarkEnv returns the environment to re-execute the benchmark
// commands, perf and bench, with: asynchronous preemption off (see
// internal/godebug), unless GODEBUG already says. It returns false for
// other commands, and when there is nothing to change.
func benchmarkEnv(args, environ []string) ([]string, bool) {
	if len(args) == 0 || (args[0] != "perf" && args[0] != "bench") {
		return nil, false
	}
	return godebug.WithAsyncPreemptOff(environ)
}

// reexec replaces the process with itself, run with env. If that fails
// the command goes on in this process, with a warning: the settings env
// carries make a benchmark steadier, not correct.
func reexec(env []string) {
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, env)
	}
	fmt.Fprintf(os.Stderr, "rivet: running with the default runtime settings: re-executing: %v\n", err)
}

// run executes one rivet command and returns the process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "devices":
		err = devicesCmd(args[1:], stdout, stderr)
	case "rxe":
		err = rxeCmd(args[1:], stdout)
	case "events":
		err = eventsCmd(ctx, args[1:], stdout, stderr)
	case "perf":
		err = perfCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(ctx, args[1:], stdout, stderr)
	case "fault":
		err = faultCmd(args[1:], stdout, stderr)
	case "plot":
		err = plotCmd(args[1:], os.Stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "rivet: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch err {
	case errHelp:
		return 0
	case errUsage:
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "rivet:", err)
		return 1
	}
	return 0
}
