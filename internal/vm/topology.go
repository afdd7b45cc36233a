//go:build linux

package vm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/rivet-hpc/rivet/hw"
)

// rxeLink is one soft-RoCE device of a topology.
type rxeLink struct{ dev, netdev, cidr string }

var topologyLinks = map[Topology][]rxeLink{
	TopologyNone: nil,
	TopologyRXE:  {{"rxe0", "va", "192.0.2.1/24"}},
	TopologyRXE2: {{"rxe0", "va", "192.0.2.1/24"}, {"rxe1", "vb", "192.0.2.2/24"}},
}

// rxeModules are loaded before any rxe link is made; crc32_generic because
// rdma_rxe's ICRC needs a crc32 implementation and nothing loads it on demand.
var rxeModules = []string{"crc32_generic", "ipv6", "veth", "ib_uverbs", "rdma_ucm", "rdma_rxe"}

// topologyReady bounds how long set-up waits for ports and GIDs.
const topologyReady = 20 * time.Second

// setupTopology builds t in the guest. It returns a one-line description and
// the variables that tell the command what was built.
func setupTopology(t Topology, node int) (string, []string, error) {
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return "", nil, fmt.Errorf("bringing up lo: %w", err)
	}
	if n, ok := clusterNodes(t); ok {
		return setupClusterNode(t, node, n)
	}
	links := topologyLinks[t]
	env := []string{"RXEVM_TOPOLOGY=" + string(t)}
	if len(links) == 0 {
		return "loopback only", env, nil
	}
	for _, m := range rxeModules {
		if out, err := exec.Command("modprobe", m).CombinedOutput(); err != nil {
			return "", nil, fmt.Errorf("modprobe %s: %v: %s", m, err, strings.TrimSpace(string(out)))
		}
	}
	// rxe hands a whole RDMA read response (8192 packets for 8 MiB) to the
	// netdev in one burst; the default backlog of 1000 drops part of it, and
	// rxe spends a transport retry on every gap, so a large read can fail
	// with retry-exceeded. Measured: 128 drops in 8 reads of 8 MiB.
	if err := os.WriteFile("/proc/sys/net/core/netdev_max_backlog", []byte("65536"), 0o644); err != nil {
		return "", nil, fmt.Errorf("raising netdev_max_backlog: %w", err)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "va"}, PeerName: "vb"}
	if err := netlink.LinkAdd(veth); err != nil {
		return "", nil, fmt.Errorf("creating veth va/vb: %w", err)
	}
	for _, l := range links {
		if err := addrAdd(l.netdev, l.cidr); err != nil {
			return "", nil, err
		}
	}
	for _, name := range []string{"va", "vb"} {
		l, err := netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			return "", nil, fmt.Errorf("bringing up %s: %w", name, err)
		}
	}
	if len(links) > 1 {
		// Both ends' addresses are local to this one kernel, and Linux
		// ignores ARP from a sender address it owns: without accept_local
		// the RTR transition between rxe0 and rxe1 fails with ETIMEDOUT
		// (address resolution), as perftest does with IPv4 GIDs.
		for _, dev := range []string{"all", "va", "vb"} {
			for knob, v := range map[string]string{"accept_local": "1", "rp_filter": "0"} {
				p := "/proc/sys/net/ipv4/conf/" + dev + "/" + knob
				if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
					return "", nil, fmt.Errorf("setting %s: %w", p, err)
				}
			}
		}
	}
	var desc, devs []string
	for _, l := range links {
		if err := hw.AddRXE(l.dev, l.netdev); err != nil {
			return "", nil, err
		}
		ip, _, _ := net.ParseCIDR(l.cidr)
		g, err := waitRoCE(l.dev, ip)
		if err != nil {
			return "", nil, err
		}
		desc = append(desc, fmt.Sprintf("%s on %s (%s, GID index %d %s)", l.dev, l.netdev, ip, g.Index, g.GID))
		devs = append(devs, l.dev)
	}
	env = append(env, "RIVET_RXE_DEVICES="+strings.Join(devs, ","))
	return strings.Join(desc, ", "), env, nil
}

func addrAdd(netdev, cidr string) error {
	l, err := netlink.LinkByName(netdev)
	if err != nil {
		return fmt.Errorf("%s: %w", netdev, err)
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	// No duplicate address detection: there is no one else on this link,
	// and IPv6 DAD would keep the link-local GID back for a second.
	a.Flags |= 0x02 // IFA_F_NODAD
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("adding %s to %s: %w", cidr, netdev, err)
	}
	return nil
}

// waitRoCE waits until dev's port 1 is ACTIVE and carries the RoCE v2 GID
// of ip: both appear asynchronously after the link is added.
func waitRoCE(dev string, ip net.IP) (hw.GIDAddr, error) {
	deadline := time.Now().Add(topologyReady)
	var last error
	for time.Now().Before(deadline) {
		d, err := hw.DeviceByName(dev)
		switch {
		case err != nil:
			last = err
		case len(d.Ports) == 0:
			last = errors.New("no ports")
		case d.Ports[0].State != hw.PortActive:
			last = fmt.Errorf("port 1 is %s", d.Ports[0].State)
		default:
			g, err := hw.GIDByIP(ip)
			if err == nil && g.Device == dev {
				return g, nil
			}
			last = fmt.Errorf("no RoCE v2 GID for %s yet", ip)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return hw.GIDAddr{}, fmt.Errorf("%s not ready after %v: %v", dev, topologyReady, last)
}
