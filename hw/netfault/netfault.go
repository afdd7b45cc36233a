//go:build linux

// Package netfault drops RoCE v2 packets on a network device, to test
// what a job does under packet loss: an eBPF program on the device's tc
// hooks (both ways, through a clsact qdisc) drops UDP packets to or from
// port 4791 whose peer address has a loss rule, with that rule's
// probability. Rules change at run time through a map, and the injection
// outlives the process that set it (the maps are pinned in bpffs) until
// Remove.
//
// The program is assembled in Go (cilium/ebpf's asm): no clang, no C. Only
// IPv4 RoCE is matched; other packets always pass. Traffic between two
// devices of one kernel never reaches tc (rxe loops it back inside the
// kernel), so inject on a link between kernels. See docs/fault.md.
package netfault

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/hw"
)

// RoCEPort is RoCE v2's UDP destination port.
const RoCEPort = 4791

// PinRoot is where the maps of every device's injection are pinned:
// PinRoot/<device>/rules and …/counts.
const PinRoot = "/sys/fs/bpf/rivet-netfault"

// filterName names the tc filters this package attaches.
const filterName = "rivet_netfault"

// ppm is the scale of a rule's probability: drops per million packets.
const ppm = 1_000_000

// ErrNotSupported wraps the reason the kernel cannot inject: no eBPF, no
// clsact, no bpffs. It is hw.ErrNotSupported.
var ErrNotSupported = hw.ErrNotSupported

// Injector is the loss injection on one device.
type Injector struct {
	dev           string
	rules, counts *ebpf.Map
}

// Open returns the device's injection, attaching it first if it is not
// attached: the programs on the device's egress and ingress, and their
// maps pinned under PinRoot. It needs root (CAP_NET_ADMIN and
// CAP_BPF/CAP_SYS_ADMIN). A fresh injection has no rule: nothing drops.
// An injection whose filters were removed behind its back (the qdisc
// deleted, the device made anew) is attached afresh, without its rules.
func Open(dev string) (*Injector, error) {
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("netfault: %s: %w", dev, err)
	}
	dir := filepath.Join(PinRoot, dev)
	in := &Injector{dev: dev}
	in.rules, err = ebpf.LoadPinnedMap(filepath.Join(dir, "rules"), nil)
	if err == nil {
		if in.counts, err = ebpf.LoadPinnedMap(filepath.Join(dir, "counts"), nil); err == nil {
			if attached(link) {
				return in, nil
			}
			// The pins outlived the filters (the qdisc was deleted, or the
			// device made anew): start again.
			in.Close()
			os.RemoveAll(dir)
			in = &Injector{dev: dev}
			err = os.ErrNotExist
		} else {
			in.rules.Close()
		}
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("netfault: %s: the pinned maps: %w", dev, err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("netfault: %w: %v", ErrNotSupported, err)
	}
	if err := in.newMaps(); err != nil {
		return nil, err
	}
	if err := in.attach(link, dir); err != nil {
		in.Close()
		detach(link)
		os.RemoveAll(dir)
		return nil, err
	}
	return in, nil
}

func (in *Injector) newMaps() error {
	var err error
	in.rules, err = ebpf.NewMap(&ebpf.MapSpec{Name: "netfault_rules", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 256})
	if err == nil {
		in.counts, err = ebpf.NewMap(&ebpf.MapSpec{Name: "netfault_counts", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 2})
	}
	if err != nil {
		in.Close()
		return fmt.Errorf("netfault: creating maps: %w: %v", ErrNotSupported, err)
	}
	return nil
}

// attach loads the two programs, hangs them on the device's clsact
// hooks and pins the maps.
func (in *Injector) attach(link netlink.Link, dir string) error {
	qdisc := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index,
		Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := netlink.QdiscAdd(qdisc); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("netfault: adding a clsact qdisc to %s: %w", in.dev, err)
	}
	for _, hook := range []struct {
		parent uint32
		dir    direction
	}{{netlink.HANDLE_MIN_EGRESS, egress}, {netlink.HANDLE_MIN_INGRESS, ingress}} {
		prog, err := in.program(hook.dir)
		if err != nil {
			return err
		}
		err = netlink.FilterAdd(&netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: link.Attrs().Index, Parent: hook.parent,
				Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: 1},
			Fd: prog.FD(), Name: filterName, DirectAction: true})
		prog.Close() // the filter holds it now
		if err != nil {
			return fmt.Errorf("netfault: attaching to %s: %w", in.dev, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("netfault: %w: %v", ErrNotSupported, err)
	}
	if err := in.rules.Pin(filepath.Join(dir, "rules")); err != nil {
		return fmt.Errorf("netfault: pinning: %w", err)
	}
	if err := in.counts.Pin(filepath.Join(dir, "counts")); err != nil {
		return fmt.Errorf("netfault: pinning: %w", err)
	}
	return nil
}

// Device is the device the injection is on.
func (in *Injector) Device() string { return in.dev }

// key is a map key: an IPv4 address as the program reads it from the
// packet, or 0 for every peer.
func key(peer netip.Addr) (uint32, error) {
	if !peer.IsValid() {
		return 0, nil
	}
	if !peer.Unmap().Is4() {
		return 0, fmt.Errorf("netfault: %v: only IPv4 RoCE is matched", peer)
	}
	a := peer.Unmap().As4()
	return binary.NativeEndian.Uint32(a[:]), nil
}

// SetLoss drops RoCE packets to and from peer with probability p (0 to
// 1, in steps of one in a million); the zero Addr is every peer without
// a rule of its own. p 0 removes the rule.
func (in *Injector) SetLoss(peer netip.Addr, p float64) error {
	if math.IsNaN(p) || p < 0 || p > 1 {
		return fmt.Errorf("netfault: loss %v is not a probability from 0 to 1", p)
	}
	k, err := key(peer)
	if err != nil {
		return err
	}
	if p == 0 {
		if err := in.rules.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("netfault: %w", err)
		}
		return nil
	}
	if err := in.rules.Put(k, uint32(math.Round(p*ppm))); err != nil {
		return fmt.Errorf("netfault: %w", err)
	}
	return nil
}

// Rules returns every loss rule: peer (the zero Addr for every peer) to
// probability.
func (in *Injector) Rules() (map[netip.Addr]float64, error) {
	rules := map[netip.Addr]float64{}
	var k, v uint32
	it := in.rules.Iterate()
	for it.Next(&k, &v) {
		var peer netip.Addr
		if k != 0 {
			var a [4]byte
			binary.NativeEndian.PutUint32(a[:], k)
			peer = netip.AddrFrom4(a)
		}
		rules[peer] = float64(v) / ppm
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("netfault: %w", err)
	}
	return rules, nil
}

// Counts returns how many RoCE packets the programs saw and how many
// they dropped, since the injection was attached.
func (in *Injector) Counts() (seen, dropped uint64, err error) {
	if err := in.counts.Lookup(uint32(countSeen), &seen); err != nil {
		return 0, 0, fmt.Errorf("netfault: %w", err)
	}
	if err := in.counts.Lookup(uint32(countDropped), &dropped); err != nil {
		return 0, 0, fmt.Errorf("netfault: %w", err)
	}
	return seen, dropped, nil
}

// Close releases this handle; the injection stays until Remove.
func (in *Injector) Close() error {
	var errs []error
	for _, m := range []*ebpf.Map{in.rules, in.counts} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// Remove detaches the injection from dev and unpins its maps; a device
// without one is not an error.
func Remove(dev string) error {
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("netfault: %s: %w", dev, err)
	}
	err = detach(link)
	if rmErr := os.RemoveAll(filepath.Join(PinRoot, dev)); err == nil {
		err = rmErr
	}
	return err
}

// attached tells whether both of this package's filters are on the
// device.
func attached(link netlink.Link) bool {
	n := 0
	for _, parent := range []uint32{netlink.HANDLE_MIN_EGRESS, netlink.HANDLE_MIN_INGRESS} {
		filters, _ := netlink.FilterList(link, parent)
		for _, f := range filters {
			if b, ok := f.(*netlink.BpfFilter); ok && b.Name == filterName {
				n++
				break
			}
		}
	}
	return n == 2
}

// detach deletes this package's filters from the device, and its clsact
// qdisc once no filter is left on it.
func detach(link netlink.Link) error {
	left := 0
	for _, parent := range []uint32{netlink.HANDLE_MIN_EGRESS, netlink.HANDLE_MIN_INGRESS} {
		filters, err := netlink.FilterList(link, parent)
		if err != nil {
			continue // no clsact: nothing attached
		}
		for _, f := range filters {
			if b, ok := f.(*netlink.BpfFilter); ok && b.Name == filterName {
				if err := netlink.FilterDel(f); err != nil {
					return fmt.Errorf("netfault: detaching from %s: %w", link.Attrs().Name, err)
				}
				continue
			}
			left++
		}
	}
	if left == 0 {
		qdisc := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index,
			Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
		if err := netlink.QdiscDel(qdisc); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("netfault: removing %s's clsact qdisc: %w", link.Attrs().Name, err)
		}
	}
	return nil
}
