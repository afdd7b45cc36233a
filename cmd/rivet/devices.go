//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rivet-hpc/rivet/hw"
)

// errUsage means a flag set already printed its complaint.
var errUsage = errors.New("usage")

// errHelp means -h was asked for and answered.
var errHelp = errors.New("help")

// parseFlags parses a subcommand's flags, mapping the flag package's
// outcomes onto errHelp and errUsage.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return errUsage
	}
	return nil
}

func devicesCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rivet devices", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rivet devices: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	devs, err := hw.Devices()
	if err != nil && len(devs) == 0 {
		return err
	}
	if *asJSON {
		if devs == nil {
			devs = []hw.Device{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if eerr := enc.Encode(devs); eerr != nil {
			return eerr
		}
	} else if len(devs) == 0 {
		fmt.Fprintln(stderr, "rivet: no RDMA devices found")
		if perr := hw.HaveUverbs(); perr != nil {
			fmt.Fprintf(stderr, "rivet: %v\n", perr)
		}
	} else {
		printDevices(stdout, devs)
	}
	return err // partial results were printed; still report what was missing
}

// printDevices prints what ibv_devinfo -v prints about devices and ports,
// laid out the same way.
func printDevices(w io.Writer, devs []hw.Device) {
	kv := func(indent int, key string, format string, args ...any) {
		fmt.Fprintf(w, "%s%-*s%s\n", strings.Repeat("\t", indent), 24-8*indent+8, key+":", fmt.Sprintf(format, args...))
	}
	for i, d := range devs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "hca_id:\t%s\n", d.Name)
		kv(1, "node_type", "%s", d.NodeType)
		kv(1, "driver", "%s", d.Driver)
		if d.Parent != "" {
			kv(1, "netdev", "%s", d.Parent)
		}
		kv(1, "fw_ver", "%s", d.FWVersion)
		kv(1, "node_guid", "%s", d.NodeGUID)
		kv(1, "sys_image_guid", "%s", d.SysImageGUID)
		kv(1, "uverbs", "%s (ABI %d)", d.Uverbs, d.ABIVersion)
		kv(1, "phys_port_cnt", "%d", len(d.Ports))
		for _, p := range d.Ports {
			kv(2, "port", "%d", p.Number)
			kv(3, "state", "PORT_%s (%d)", p.State, p.State)
			kv(3, "phys_state", "%s (%d)", p.PhysState, p.PhysState)
			kv(3, "max_mtu", "%s (%d)", p.MaxMTU, p.MaxMTU)
			kv(3, "active_mtu", "%s (%d)", p.ActiveMTU, p.ActiveMTU)
			kv(3, "port_lid", "%d", p.LID)
			kv(3, "link_layer", "%s", p.LinkLayer)
			if p.Netdev != "" {
				kv(3, "netdev", "%s", p.Netdev)
			}
			if p.Rate != "" {
				kv(3, "rate", "%s", p.Rate)
			}
			for _, g := range p.GIDs {
				kv(3, fmt.Sprintf("GID[%3d]", g.Index), "%s, %s", g.GID, g.Type)
			}
		}
	}
}
