//go:build linux

package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/rivet-hpc/rivet/hw/netfault"
)

const faultUsage = `usage: rivet fault <loss|show|clear> -dev NETDEV [flags]

Injects RoCE v2 packet loss on a network device with an eBPF program on
its tc hooks, both ways (root). The injection stays after rivet exits,
until "rivet fault clear".

  loss   -dev D [-peer ADDR] -percent P   drop P% of the RoCE packets to and
                                          from ADDR (every peer without a
                                          rule of its own if no -peer);
                                          -percent 0 removes the rule
  show   -dev D                           the rules, and packets seen and dropped
  clear  -dev D                           remove the injection

Flags:
`

func faultCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || !slices.Contains([]string{"loss", "show", "clear"}, args[0]) {
		fmt.Fprint(stderr, faultUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("rivet fault "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), faultUsage); fs.PrintDefaults() }
	dev := fs.String("dev", "", "the network `device` (the one the RDMA device runs on)")
	peer := fs.String("peer", "", "the peer's IPv4 `address`; none means every peer")
	percent := fs.Float64("percent", -1, "the `percentage` of packets to drop, 0 to 100")
	if err := parseFlags(fs, args[1:], stderr); err != nil {
		return err
	}
	bad := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "rivet fault: "+format+"\n", a...)
		return errUsage
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected arguments %q", fs.Args())
	case *dev == "":
		return bad("-dev is required")
	case args[0] == "loss" && (*percent < 0 || *percent > 100):
		return bad("loss needs -percent from 0 to 100")
	case args[0] != "loss" && (*peer != "" || *percent >= 0):
		return bad("-peer and -percent go with loss")
	}
	if args[0] == "clear" {
		return netfault.Remove(*dev)
	}
	in, err := netfault.Open(*dev)
	if err != nil {
		return err
	}
	defer in.Close()
	if args[0] == "loss" {
		var addr netip.Addr
		if *peer != "" {
			if addr, err = netip.ParseAddr(*peer); err != nil {
				return bad("-peer %q is not an address", *peer)
			}
		}
		return in.SetLoss(addr, *percent/100)
	}
	rules, err := in.Rules()
	if err != nil {
		return err
	}
	seen, dropped, err := in.Counts()
	if err != nil {
		return err
	}
	var lines []string
	for p, v := range rules {
		name := "every peer"
		if p.IsValid() {
			name = p.String()
		}
		lines = append(lines, fmt.Sprintf("  %-15s %g%%", name, v*100))
	}
	slices.Sort(lines)
	fmt.Fprintf(stdout, "%s: RoCE packets seen %d, dropped %d\nloss rules:\n%s\n", *dev, seen, dropped, strings.Join(lines, "\n"))
	return nil
}
