//go:build linux

package vm

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/rivet-hpc/rivet/hw"
)

// ClusterShared is where every node of a cluster mounts one directory
// of the runner's, writable and seen alike by all (RXEVM_SHARED): for
// configuration the nodes share, such as a Slurm cluster's.
const ClusterShared = "/run/rxevm-cluster"

// clusterTag is the 9p tag of the cluster's shared directory.
const clusterTag = "rxevmcluster"

// NodeName is the host name of cluster node i (from 1).
func NodeName(i int) string { return "node" + strconv.Itoa(i) }

// NodeAddr is the address of cluster node i (from 1) on the cluster's link.
func NodeAddr(i int) string { return "192.0.2." + strconv.Itoa(i) }

// nodeMAC is node i's NIC address; the switch forwards by it.
func nodeMAC(i int) net.HardwareAddr { return net.HardwareAddr{0x52, 0x54, 0x00, 0x52, 0x56, byte(i)} }

// clusterNIC is the guest's name for its one NIC: without udev nothing
// renames it.
const clusterNIC = "eth0"

// setupClusterNode gives this node its address on eth0, a soft-RoCE
// device on it and /etc/hosts naming every node.
func setupClusterNode(t Topology, node, nodes int) (string, []string, error) {
	if node < 1 || node > nodes {
		return "", nil, fmt.Errorf("node %d of a cluster of %d", node, nodes)
	}
	for _, m := range append([]string{"virtio_net"}, rxeModules...) {
		if out, err := exec.Command("modprobe", m).CombinedOutput(); err != nil {
			return "", nil, fmt.Errorf("modprobe %s: %v: %s", m, err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.WriteFile("/proc/sys/net/core/netdev_max_backlog", []byte("65536"), 0o644); err != nil {
		return "", nil, fmt.Errorf("raising netdev_max_backlog: %w", err)
	}
	addr := NodeAddr(node)
	if err := addrAdd(clusterNIC, addr+"/24"); err != nil {
		return "", nil, err
	}
	l, err := netlink.LinkByName(clusterNIC)
	if err == nil {
		err = netlink.LinkSetUp(l)
	}
	if err != nil {
		return "", nil, fmt.Errorf("bringing up %s: %w", clusterNIC, err)
	}
	hosts := "127.0.0.1 localhost\n"
	var addrs []string
	for i := 1; i <= nodes; i++ {
		hosts += NodeAddr(i) + " " + NodeName(i) + "\n"
		addrs = append(addrs, NodeAddr(i))
	}
	if err := os.WriteFile("/etc/hosts", []byte(hosts), 0o644); err != nil {
		return "", nil, fmt.Errorf("writing /etc/hosts: %w", err)
	}
	if err := hw.AddRXE("rxe0", clusterNIC); err != nil {
		return "", nil, err
	}
	g, err := waitRoCE("rxe0", net.ParseIP(addr))
	if err != nil {
		return "", nil, err
	}
	env := []string{"RXEVM_TOPOLOGY=" + string(t), "RIVET_RXE_DEVICES=rxe0",
		"RXEVM_NODE=" + strconv.Itoa(node), "RXEVM_NODES=" + strconv.Itoa(nodes),
		"RXEVM_NODE_ADDRS=" + strings.Join(addrs, ","), "RXEVM_SHARED=" + ClusterShared, "RXEVM_CONTROL=" + controlTTY}
	if node != 1 {
		env = env[:len(env)-1] // only node 1 talks to the runner
	}
	return fmt.Sprintf("%s: rxe0 on %s (%s, GID index %d %s)", NodeName(node), clusterNIC, addr, g.Index, g.GID), env, nil
}
