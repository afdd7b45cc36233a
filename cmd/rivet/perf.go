//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/rivet-hpc/rivet/bench/perf"
	"github.com/rivet-hpc/rivet/internal/sysmon"
)

const perfUsage = `usage: rivet perf <test> [flags] [server address]

Tests (as perftest's ib_<test>): ` + "write_lat read_lat atomic_lat send_lat write_bw read_bw" + `
Start the server without an address, then the client with the server's
address, with the same test and flags on both sides.

Flags:
`

func perfCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, perfUsage)
		return errUsage
	}
	cfg := perf.Config{Test: args[0]}
	fs := flag.NewFlagSet("rivet perf "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), perfUsage); fs.PrintDefaults() }
	fs.StringVar(&cfg.Device, "d", "", "RDMA `device` (default: the first active one)")
	fs.IntVar(&cfg.IBPort, "i", 1, "device `port`")
	fs.IntVar(&cfg.GIDIndex, "x", -1, "source GID `index` (default: the port's IPv4 RoCE v2 GID)")
	fs.IntVar(&cfg.Size, "s", 0, "message `size` (default 2 for latency, 65536 for bandwidth)")
	fs.IntVar(&cfg.Iters, "n", 0, "`iterations` (default 1000 for latency, 5000 for bandwidth)")
	fs.BoolVar(&cfg.AllSizes, "a", false, "run every size from 2 bytes to 8 MiB")
	fs.IntVar(&cfg.Port, "p", 18515, "TCP `port` of the out-of-band exchange")
	fs.IntVar(&cfg.TxDepth, "t", 128, "outstanding requests, bandwidth tests")
	fs.IntVar(&cfg.Inline, "I", -1, "largest message sent inline (default 220 for writes and sends, as perftest)")
	fs.StringVar(&cfg.Atomic, "A", "FETCH_AND_ADD", "atomic_lat's operation: FETCH_AND_ADD or CMP_AND_SWAP")
	fs.BoolVar(&cfg.Histogram, "H", false, "print every iteration's latency, sorted (latency tests)")
	fs.BoolVar(&cfg.Unsorted, "U", false, "print every iteration's latency in the order measured (implies -H)")
	fs.IntVar(&cfg.QPTimeout, "u", 14, "QP ACK timeout `exponent`: a retransmission after 4.096 µs << it (1 to 31)")
	if err := parseFlags(fs, args[1:], stderr); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "rivet perf: more than one server address\n")
		return errUsage
	}
	cfg.Server = fs.Arg(0)
	// One thread runs Go code, as perftest's one thread runs C: the loop
	// needs no other.
	if os.Getenv("GOMAXPROCS") == "" {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	// Pinned to one CPU (as lab/perftest.sh runs it), the runtime's
	// monitor thread would preempt the loop every 10 ms.
	if err := sysmon.FromEnv(); err != nil {
		return err
	}
	_, err := perf.Run(ctx, cfg, stdout)
	return err
}
