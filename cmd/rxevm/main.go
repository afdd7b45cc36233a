//go:build linux

// Command rxevm runs a command inside a throwaway qemu VM booted from the
// host's Debian kernel, with a soft-RoCE topology built before it starts.
// It is usable as `go test -exec rxevm`. See docs/rxevm.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rivet-hpc/rivet/internal/progress"
	"github.com/rivet-hpc/rivet/internal/vm"
)

// Exit statuses of the runner itself, chosen not to clash with the usual
// meanings of a command's own statuses (as timeout(1) and env(1) do).
const (
	exitTimeout = 124
	exitRunner  = 125
)

const usage = `usage: rxevm [flags] [--] command [args...]

Runs command inside a throwaway qemu VM booted from the host's kernel and
returns its exit status. The guest sees the host's root file system
read-only with a tmpfs overlay (writes vanish with the VM), the same
working directory and environment, and the chosen network topology.
stdout and stderr stream back separately as the command writes them.

Use it for go test:  go test -exec 'rxevm -topology rxe' ./...

Topologies:
  none  loopback only
  rxe   veth va/vb, 192.0.2.1 on va, soft-RoCE device rxe0 on va
  rxe2  rxe plus 192.0.2.2 on vb and rxe1 on vb
  cluster:N  N VMs (2 to 4), each its own kernel: node1… with 192.0.2.i
        and rxe0 on eth0, joined by a switch in rxevm; the command runs
        on node1, -node-cmd on the others
The command gets RXEVM_TOPOLOGY and RIVET_RXE_DEVICES (e.g. "rxe0,rxe1");
in a cluster also RXEVM_NODE, RXEVM_NODES, RXEVM_NODE_ADDRS, and on node1
RXEVM_CONTROL, the port that takes faults (docs/rxevm.md).

Exit status: the command's own; 128+N if signal N killed it; 124 on
timeout; 125 if the runner failed (bad flags, no kernel or qemu, topology
not built, VM died without a status).

Flags (each also settable through the environment variable shown):
`

func main() {
	if vm.IsAgent() {
		vm.Agent()
	}
	os.Exit(run(os.Args[1:]))
}

func run(argv []string) int {
	fs := flag.NewFlagSet("rxevm", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	topology := fs.String("topology", env("RXEVM_TOPOLOGY", "none"), "network `topology`: none, rxe, rxe2, cluster:N ($RXEVM_TOPOLOGY)")
	kernel := fs.String("kernel", env("RXEVM_KERNEL", ""), "kernel `version or vmlinuz path`; default the newest in /boot with modules ($RXEVM_KERNEL)")
	qemu := fs.String("qemu", env("RXEVM_QEMU", "qemu-system-x86_64"), "qemu `binary` ($RXEVM_QEMU)")
	cache := fs.String("cache", vm.DefaultCacheDir(), "`directory` for cached initramfs images and probe results ($RXEVM_CACHE)")
	timeout := fs.Duration("timeout", durationEnv("RXEVM_TIMEOUT", 10*time.Minute), "kill the VM after this `duration`; 0 means never ($RXEVM_TIMEOUT)")
	startTimeout := fs.Duration("start-timeout", durationEnv("RXEVM_START_TIMEOUT", vm.DefaultStartTimeout), "boot again, once, a guest that has not started the command after this `duration`; negative means never ($RXEVM_START_TIMEOUT)")
	accel := fs.String("accel", env("RXEVM_ACCEL", "auto"), "`accelerator`: auto (probe KVM once, else TCG), kvm, tcg ($RXEVM_ACCEL)")
	mem := fs.String("m", env("RXEVM_MEM", ""), "guest `memory`: default 2G, 1G per cluster node ($RXEVM_MEM)")
	cpus := fs.Int("smp", 0, "guest `vCPUs`: default 2, 1 per cluster node")
	var tscDefault uint64
	if v := os.Getenv("RXEVM_TSC_KHZ"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "rxevm: RXEVM_TSC_KHZ=%q is not a rate in kHz\n", v)
			return exitRunner
		}
		tscDefault = n
	}
	tscKHz := fs.Uint64("tsc-khz", tscDefault, "under TCG, the time-stamp counter's `rate` in kHz the guest kernel is told; default the host's, measured ($RXEVM_TSC_KHZ)")
	nodeCmd := fs.String("node-cmd", "", "in a cluster, the shell `command` nodes 2… run while node 1 runs the command")
	quiet := fs.Bool("q", false, "do not print the topology banner on stderr")
	verbose := fs.Bool("v", false, "print kernel, accelerator and timings on stderr (and a cluster switch's dropped frames)")
	fault := fs.String("fault", "", "inside node1 of a cluster, ask the runner for a fault `command` and exit: kill N, stop N, cont N, link N up|down, partition 1,2 3, heal")
	if err := fs.Parse(argv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitRunner
	}
	if *fault != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := vm.Control(ctx, *fault); err != nil {
			fmt.Fprintln(os.Stderr, "rxevm:", err)
			return 1
		}
		return 0
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "rxevm: no command given (see rxevm -help)")
		return exitRunner
	}
	topo, err := vm.ParseTopology(*topology)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rxevm:", err)
		return exitRunner
	}
	var nodeArgs []string
	if *nodeCmd != "" {
		if topo.Nodes() == 1 {
			fmt.Fprintln(os.Stderr, "rxevm: -node-cmd needs a cluster topology")
			return exitRunner
		}
		nodeArgs = []string{"sh", "-c", *nodeCmd}
	}
	wd, _ := os.Getwd()
	guestEnv := os.Environ()
	if !progress.IsTerminal(os.Stderr) {
		// The command's output reaches the guest as a serial terminal:
		// TERM=dumb says it is captured here, so that progress lines
		// (package progress, lab/progress.sh) stay out of it.
		guestEnv = append(guestEnv, "TERM=dumb")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	res, err := vm.Run(ctx, vm.Config{
		Args: fs.Args(), Env: guestEnv, Dir: wd, Topology: topo,
		Kernel: *kernel, QEMU: *qemu, CacheDir: *cache, Timeout: *timeout, StartTimeout: *startTimeout,
		Accel: vm.Accel(*accel), Memory: *mem, CPUs: *cpus, TSCkHz: *tscKHz, Quiet: *quiet, NodeArgs: nodeArgs,
		Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if *verbose {
		fmt.Fprintf(os.Stderr, "rxevm: kernel %s, accel %s, guest TSC %d kHz, guest boot %v, total %v\n",
			res.Kernel, res.Accel, res.TSCkHz, res.Boot.Round(time.Millisecond), res.Total.Round(time.Millisecond))
		if topo.Nodes() > 1 {
			fmt.Fprintf(os.Stderr, "rxevm: the switch dropped %d frames at full nodes\n", res.Dropped)
		}
	}
	switch {
	case errors.Is(err, vm.ErrTimeout):
		fmt.Fprintln(os.Stderr, "rxevm:", err)
		return exitTimeout
	case err != nil:
		fmt.Fprintln(os.Stderr, "rxevm:", strings.TrimSpace(err.Error()))
		return exitRunner
	case res.Signal != 0:
		fmt.Fprintf(os.Stderr, "rxevm: %s: killed by signal %d (%v)\n", fs.Arg(0), int(res.Signal), res.Signal)
	}
	return res.Status()
}

func durationEnv(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}
