//go:build linux

package hw

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/internal/uverbs"
)

// These tests need soft-RoCE: they run inside rxevm (the README's test
// command does that) and skip elsewhere, or fail under RIVET_REQUIRE_RDMA=1.

func TestProbesInVM(t *testing.T) {
	testutil.RXEDevices(t)
	for name, probe := range map[string]func() error{"uverbs": HaveUverbs, "rxe": HaveRXE, "rdma netlink": HaveRDMANetlink} {
		if err := probe(); err != nil {
			t.Errorf("%s probe: %v", name, err)
		}
	}
}

// TestTopologyDevices checks what rxevm built, as hw sees it.
func TestTopologyDevices(t *testing.T) {
	devs := testutil.RXEDevices(t)
	testutil.CheckFDs(t)
	for _, name := range devs {
		d, err := DeviceByName(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d.Driver != "rxe" || d.Uverbs == "" || len(d.Ports) != 1 {
			t.Fatalf("%s = %+v", name, d)
		}
		p := d.Ports[0]
		// rxe on a 1500-byte netdev: max 4096, active 1024 (verified with ibv_devinfo).
		if p.State != PortActive || p.PhysState != PhysLinkUp || p.LinkLayer != "Ethernet" ||
			p.MaxMTU.Bytes() != 4096 || p.ActiveMTU.Bytes() != 1024 {
			t.Errorf("%s port 1 = %+v", name, p)
		}
		// The table came from QUERY_GID_TABLE; sysfs must agree with it.
		if sysfs := readGIDs("/sys/class/infiniband/" + name + "/ports/1"); !reflect.DeepEqual(p.GIDs, sysfs) {
			t.Errorf("%s GIDs: ioctl %+v, sysfs %+v", name, p.GIDs, sysfs)
		}
		c, err := uverbs.Open(d.Uverbs)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := c.QueryGIDTable(uverbs.DriverRXE, p.GIDTblLen)
		c.Close()
		if err != nil || len(raw) != len(p.GIDs) {
			t.Errorf("%s QUERY_GID_TABLE = %d entries, %v; want %d", name, len(raw), err, len(p.GIDs))
		}
		for _, r := range raw {
			if !slices.ContainsFunc(p.GIDs, func(g GIDEntry) bool { return g.Index == int(r.GIDIndex) && g.GID == GID(r.GID) }) {
				t.Errorf("%s: QUERY_GID_TABLE entry %d %v is not in the port's table %+v", name, r.GIDIndex, GID(r.GID), p.GIDs)
			}
		}
		g, err := GIDByNetdev(p.Netdev)
		if err != nil || g.Device != name || !g.GID.IsIPv4() {
			t.Errorf("GIDByNetdev(%s) = %+v, %v", p.Netdev, g, err)
		}
		t.Logf("%s: %s port 1 %s mtu %s/%s gid[%d] %s", name, d.Uverbs, p.State, p.ActiveMTU, p.MaxMTU, g.Index, g.GID)
	}
}

// BenchmarkDeviceByName measures what every verbs.Open pays to describe its
// device, with the GID table from the ioctl and from sysfs.
func BenchmarkDeviceByName(b *testing.B) {
	devs := testutil.RXEDevices(b)
	for _, mode := range []string{"ioctl", "sysfs"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "sysfs" {
				old := driverIDs
				driverIDs = nil
				defer func() { driverIDs = old }()
			}
			for b.Loop() {
				if _, err := DeviceByName(devs[0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRXELifecycle creates its own veth and rxe device through hw, finds it,
// matches its GID to the veth's IP, sees the port go down within a second
// of `ip link set … down` and come back, and deletes it.
func TestRXELifecycle(t *testing.T) {
	testutil.RXEDevices(t)
	testutil.RequireRoot(t)
	const netdev, peer, dev = "rvt0", "rvt1", "rvtest0"
	ip := net.ParseIP("198.51.100.1")
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: netdev}, PeerName: peer}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkDel(veth) })
	addr, _ := netlink.ParseAddr("198.51.100.1/24")
	link, _ := netlink.LinkByName(netdev)
	peerLink, _ := netlink.LinkByName(peer)
	if err := netlink.AddrAdd(link, addr); err != nil {
		t.Fatal(err)
	}
	netlink.LinkSetUp(link)
	netlink.LinkSetUp(peerLink)

	if err := AddRXE(dev, netdev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DeleteRXE(dev) })

	var g GIDAddr
	waitFor(t, 10*time.Second, "RoCE v2 GID of "+ip.String(), func() error {
		var err error
		g, err = GIDByIP(ip)
		if err == nil && g.Device != dev {
			err = errors.New("found on " + g.Device)
		}
		return err
	})
	if g.Netdev != netdev || g.Type != GIDTypeRoCEv2 || !g.GID.IP().Equal(ip) {
		t.Errorf("GID = %+v", g)
	}
	waitFor(t, 10*time.Second, dev+" ACTIVE", func() error {
		d, err := DeviceByName(dev)
		if err == nil && d.Ports[0].State != PortActive {
			err = errors.New(d.Ports[0].State.String())
		}
		return err
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ipLink(t, "set", netdev, "down")
	e := waitEvent(t, events, EventPortDown, dev, time.Second)
	t.Logf("port down seen %v after ip link set down: %v", time.Since(start).Round(time.Millisecond), e)
	if e.State == PortActive || e.Netdev != netdev {
		t.Errorf("event = %v", e)
	}
	start = time.Now()
	ipLink(t, "set", netdev, "up")
	e = waitEvent(t, events, EventPortActive, dev, 5*time.Second)
	t.Logf("port active seen %v after ip link set up: %v", time.Since(start).Round(time.Millisecond), e)

	if err := DeleteRXE(dev); err != nil {
		t.Fatal(err)
	}
	if _, err := DeviceByName(dev); !errors.Is(err, ErrNotFound) {
		t.Errorf("after delete: %v, want ErrNotFound", err)
	}
	cancel()
	for range events {
	} // the channel closes once ctx ends
}

func TestRXEErrors(t *testing.T) {
	devs := testutil.RXEDevices(t)
	testutil.RequireRoot(t)
	d, err := DeviceByName(devs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := AddRXE("rvbad0", "nosuchnetdev"); !errors.Is(err, ErrNotFound) {
		t.Errorf("no such netdev: %v, want ErrNotFound", err)
	}
	if err := AddRXE(devs[0], "lo"); !errors.Is(err, os.ErrExist) || !errors.Is(err, unix.ENFILE) {
		t.Errorf("taken name: %v, want os.ErrExist wrapping ENFILE", err)
	}
	if err := AddRXE("rvbad1", d.Parent); !errors.Is(err, os.ErrExist) || !errors.Is(err, unix.EEXIST) {
		t.Errorf("netdev with rxe already: %v, want os.ErrExist wrapping EEXIST", err)
	}
	if err := AddRXE("", "lo"); err == nil {
		t.Error("empty name accepted")
	}
	if err := DeleteRXE("nosuchdev"); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete missing: %v, want ErrNotFound", err)
	}
}

func ipLink(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"link"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip link %v: %v: %s", args, err, out)
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, limit, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitEvent(t *testing.T, events <-chan Event, kind EventKind, dev string, limit time.Duration) Event {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("event stream closed waiting for %v", kind)
			}
			if e.Kind == EventError {
				t.Fatalf("event stream: %v", e.Err)
			}
			if e.Kind == kind && e.Device == dev {
				return e
			}
			t.Logf("event: %v", e)
		case <-timer.C:
			t.Fatalf("no %v event for %s within %v", kind, dev, limit)
		}
	}
}
