//go:build linux

package netfault

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// frame is an Ethernet frame carrying IPv4 from src to dst, with proto
// (17 UDP) and, for UDP, the destination port.
func frame(src, dst string, proto byte, port uint16) []byte {
	f := make([]byte, 14+20+8+16)
	f[12], f[13] = 0x08, 0x00
	ip := f[14:]
	ip[0] = 0x45 // version 4, 20-byte header
	ip[9] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	udp := ip[20:]
	udp[2], udp[3] = byte(port>>8), byte(port)
	return f
}

// maps makes an injector's maps without attaching anything, or skips
// where this kernel or user cannot load eBPF.
func maps(t *testing.T) *Injector {
	t.Helper()
	testutil.RequireRoot(t)
	in := &Injector{dev: "test"}
	if err := in.newMaps(); err != nil {
		testutil.Unavailable(t, err.Error())
	}
	t.Cleanup(func() { in.Close() })
	return in
}

// TestProgram runs the programs on frames (BPF_PROG_TEST_RUN): RoCE to or
// from a peer with a rule drops with its probability; anything else
// passes.
func TestProgram(t *testing.T) {
	in := maps(t)
	out, err := in.program(egress)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	back, err := in.program(ingress)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	run := func(p *ebpf.Program, f []byte) uint32 {
		t.Helper()
		ret, err := p.Run(&ebpf.RunOptions{Data: f})
		if err != nil {
			t.Fatal(err)
		}
		return ret
	}
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	toB := frame("192.0.2.1", "192.0.2.2", 17, RoCEPort)
	fromB := frame("192.0.2.2", "192.0.2.1", 17, RoCEPort)
	toC := frame("192.0.2.1", "192.0.2.3", 17, RoCEPort)
	if err := in.SetLoss(b, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    *ebpf.Program
		f    []byte
		want uint32
	}{
		{"to b", out, toB, actStolen},
		{"from b", back, fromB, actShot},
		{"to c", out, toC, actOK},
		{"b's address as the source, egress", out, fromB, actOK},
		{"TCP to b", out, frame("192.0.2.1", "192.0.2.2", 6, RoCEPort), actOK},
		{"UDP to b, another port", out, frame("192.0.2.1", "192.0.2.2", 17, 4790), actOK},
		{"IPv6", out, append([]byte{12: 0x86, 13: 0xdd}, make([]byte, 60)...), actOK},
		{"a runt", out, make([]byte, 14), actOK},
	} {
		if got := run(tc.p, tc.f); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	seen, dropped, err := in.Counts()
	if err != nil || seen != 4 || dropped != 2 {
		t.Errorf("counts: seen %d dropped %d (%v), want 4 and 2", seen, dropped, err)
	}

	// A rule for every peer; b's own rule wins over it.
	if err := in.SetLoss(netip.Addr{}, 1); err != nil {
		t.Fatal(err)
	}
	if err := in.SetLoss(b, 0.5); err != nil {
		t.Fatal(err)
	}
	if got := run(out, toC); got != actStolen {
		t.Errorf("to c under the every-peer rule: %d", got)
	}
	drops := 0
	const n = 20000
	for range n {
		if run(out, toB) == actStolen {
			drops++
		}
	}
	// Binomial(20000, 0.5): the bounds are 14 standard deviations out.
	if drops < n/2-1000 || drops > n/2+1000 {
		t.Errorf("%d of %d dropped at p 0.5", drops, n)
	}
	rules, err := in.Rules()
	if err != nil || len(rules) != 2 || rules[b] != 0.5 || rules[netip.Addr{}] != 1 {
		t.Errorf("rules %v, %v", rules, err)
	}
	if err := in.SetLoss(netip.Addr{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := in.SetLoss(a, 0); err != nil { // no rule: not an error
		t.Fatal(err)
	}
	if got := run(out, toC); got != actOK {
		t.Errorf("to c with the every-peer rule removed: %d", got)
	}
	for _, p := range []float64{-0.1, 1.5} {
		if err := in.SetLoss(b, p); err == nil {
			t.Errorf("loss %v accepted", p)
		}
	}
	if err := in.SetLoss(netip.MustParseAddr("fd00::1"), 0.1); err == nil {
		t.Error("an IPv6 peer accepted")
	}
}

// TestAttach attaches to a dummy device, finds the injection again by its
// pinned maps, and removes it without a trace. It changes the machine's
// devices, so it runs in the VM.
func TestAttach(t *testing.T) {
	testutil.RXEDevices(t)
	if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "nf0"}}); err != nil {
		t.Fatal(err)
	}
	link, _ := netlink.LinkByName("nf0")
	defer netlink.LinkDel(link)
	in, err := Open("nf0")
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetLoss(netip.MustParseAddr("192.0.2.9"), 0.25); err != nil {
		t.Fatal(err)
	}
	in.Close()
	again, err := Open("nf0") // the same injection, through its pins
	if err != nil {
		t.Fatal(err)
	}
	rules, err := again.Rules()
	if err != nil || rules[netip.MustParseAddr("192.0.2.9")] != 0.25 {
		t.Errorf("rules after reopening: %v, %v", rules, err)
	}
	again.Close()
	for _, parent := range []uint32{netlink.HANDLE_MIN_EGRESS, netlink.HANDLE_MIN_INGRESS} {
		if f, err := netlink.FilterList(link, parent); err != nil || len(f) != 1 {
			t.Errorf("filters on %x: %v, %v", parent, f, err)
		}
	}
	// The qdisc deleted behind its back: the next Open attaches afresh.
	qdisc := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index,
		Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := netlink.QdiscDel(qdisc); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open("nf0")
	if err != nil {
		t.Fatal(err)
	}
	if rules, err := fresh.Rules(); err != nil || len(rules) != 0 || !attached(link) {
		t.Errorf("after the qdisc went: rules %v, %v, attached %v", rules, err, attached(link))
	}
	fresh.Close()
	if err := Remove("nf0"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(PinRoot, "nf0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pins left: %v", err)
	}
	qdiscs, _ := netlink.QdiscList(link)
	for _, q := range qdiscs {
		if q.Type() == "clsact" {
			t.Error("the clsact qdisc is left")
		}
	}
	if err := Remove("nf0"); err != nil {
		t.Errorf("removing twice: %v", err)
	}
	if _, err := Open("nosuchdev0"); err == nil {
		t.Error("opened a device that does not exist")
	}
}
