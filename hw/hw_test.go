//go:build linux

package hw

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/uverbs"
)

// fakeSysfs builds a sysfs tree with one RoCE device, mlx5_0, whose port 1
// sits on eth0 with a link-local GID at 0, an IPv4 GID at 1 (v1) and 3 (v2),
// and an unused entry at 2, and points the package at it.
func fakeSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"class/infiniband_verbs/abi_version":                "6\n",
		"class/infiniband_verbs/uverbs0/ibdev":              "mlx5_0\n",
		"class/infiniband_verbs/uverbs0/abi_version":        "1\n",
		"class/infiniband/mlx5_0/node_type":                 "1: CA\n",
		"class/infiniband/mlx5_0/node_guid":                 "b859:9f03:00d4:e6b2\n",
		"class/infiniband/mlx5_0/sys_image_guid":            "b859:9f03:00d4:e6b2\n",
		"class/infiniband/mlx5_0/fw_ver":                    "22.31.1014\n",
		"class/infiniband/mlx5_0/ports/1/state":             "4: ACTIVE\n",
		"class/infiniband/mlx5_0/ports/1/phys_state":        "5: LinkUp\n",
		"class/infiniband/mlx5_0/ports/1/link_layer":        "Ethernet\n",
		"class/infiniband/mlx5_0/ports/1/rate":              "100 Gb/sec (4X EDR)\n",
		"class/infiniband/mlx5_0/ports/1/lid":               "0x0\n",
		"class/infiniband/mlx5_0/ports/1/gids/0":            "fe80:0000:0000:0000:ba59:9fff:fed4:e6b2\n",
		"class/infiniband/mlx5_0/ports/1/gids/1":            "0000:0000:0000:0000:0000:ffff:c000:0201\n",
		"class/infiniband/mlx5_0/ports/1/gids/2":            "0000:0000:0000:0000:0000:0000:0000:0000\n",
		"class/infiniband/mlx5_0/ports/1/gids/3":            "0000:0000:0000:0000:0000:ffff:c000:0201\n",
		"class/infiniband/mlx5_0/ports/1/gid_attrs/types/0": "IB/RoCE v1\n",
		"class/infiniband/mlx5_0/ports/1/gid_attrs/types/1": "IB/RoCE v1\n",
		"class/infiniband/mlx5_0/ports/1/gid_attrs/types/3": "RoCE v2\n",
		"class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0": "eth0\n",
		"class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/1": "eth0\n",
		"class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/3": "eth0\n",
	}
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	oldRoot, oldOpen := sysfsRoot, openUverbs
	sysfsRoot = root
	openUverbs = func(path string) (uverbsDevice, error) {
		if path != "/dev/infiniband/uverbs0" {
			t.Errorf("openUverbs(%q): want uverbs0", path)
		}
		return &fakeDev{t: t, gidErr: unix.ENOTTY}, nil
	}
	t.Cleanup(func() { sysfsRoot, openUverbs = oldRoot, oldOpen })
	return root
}

// fakeDev stands in for a device's uverbs context.
type fakeDev struct {
	t       *testing.T
	gids    []uverbs.GIDEntry
	gidErr  error
	asked   [2]int // driver id and bound of the last QueryGIDTable
	closed  bool
	portErr error
}

func (f *fakeDev) QueryPort(port uint8) (uverbs.PortAttr, error) {
	if port != 1 {
		f.t.Errorf("QueryPort(%d): want port 1", port)
	}
	if f.closed {
		f.t.Error("QueryPort after Close")
	}
	return uverbs.PortAttr{MaxMTU: 5, ActiveMTU: 3, GIDTableLen: 256}, f.portErr
}

func (f *fakeDev) QueryGIDTable(driverID uint32, max int) ([]uverbs.GIDEntry, error) {
	f.asked = [2]int{int(driverID), max}
	return f.gids, f.gidErr
}

func (f *fakeDev) Close() error {
	f.closed = true
	return nil
}

// TestGIDTableIoctl reads the GID table with QUERY_GID_TABLE where the
// driver is known (rxe) and falls back to sysfs where the kernel refuses.
func TestGIDTableIoctl(t *testing.T) {
	root := fakeSysfs(t)
	// A parent netdev and no bus device make it a software (rxe) device.
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/mlx5_0/parent"), []byte("eth0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v2 := func(idx, ifindex uint32, gid string) uverbs.GIDEntry {
		g, _ := ParseGID(gid)
		return uverbs.GIDEntry{GID: g, GIDIndex: idx, PortNum: 1, GIDType: uverbs.GIDTypeRoCEv2, NetdevIfindex: ifindex}
	}
	// Entries out of order, one for a port the device lacks, one zero: the
	// answer differs from the sysfs tree, which shows which was read.
	dev := &fakeDev{t: t, gids: []uverbs.GIDEntry{
		v2(5, 7, "::ffff:192.0.2.9"), v2(0, 7, "fe80::1"), v2(2, 7, "::"),
		{GID: [16]byte{15: 1}, GIDIndex: 1, PortNum: 2, GIDType: uverbs.GIDTypeRoCEv2},
		{GID: [16]byte{0: 0xfe, 15: 2}, GIDIndex: 6, PortNum: 1, GIDType: uverbs.GIDTypeRoCEv1},
	}}
	openUverbs = func(string) (uverbsDevice, error) { return dev, nil }
	oldName := interfaceName
	interfaceName = func(i int) (string, error) {
		if i != 7 {
			t.Errorf("interfaceName(%d)", i)
		}
		return "veth7", nil
	}
	t.Cleanup(func() { interfaceName = oldName })

	d, err := DeviceByName("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	if d.Driver != "rxe" || dev.asked != [2]int{uverbs.DriverRXE, 256} || !dev.closed {
		t.Fatalf("driver %q, asked %v, closed %v", d.Driver, dev.asked, dev.closed)
	}
	got := d.Ports[0].GIDs
	if len(got) != 3 || got[0].Index != 0 || got[1].Index != 5 || got[2].Index != 6 ||
		got[1].GID.String() != "::ffff:192.0.2.9" || got[1].Type != GIDTypeRoCEv2 || got[1].Netdev != "veth7" ||
		got[2].Type != GIDTypeIB || got[2].Netdev != "" || d.Ports[0].Netdev != "veth7" {
		t.Errorf("GIDs from the ioctl = %+v (port netdev %q)", got, d.Ports[0].Netdev)
	}

	// A kernel without the method: the same device, read from sysfs.
	dev.gidErr, dev.closed = unix.EPROTONOSUPPORT, false
	d, err = DeviceByName("mlx5_0")
	if err != nil || len(d.Ports[0].GIDs) != 3 || d.Ports[0].GIDs[1].Index != 1 || d.Ports[0].Netdev != "eth0" {
		t.Errorf("GIDs from sysfs = %+v, %v", d.Ports, err)
	}
}

func TestDevicesFromSysfs(t *testing.T) {
	fakeSysfs(t)
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 {
		t.Fatalf("got %d devices, want 1", len(devs))
	}
	d := devs[0]
	if d.Name != "mlx5_0" || d.NodeType != "CA" || d.FWVersion != "22.31.1014" ||
		d.Uverbs != "/dev/infiniband/uverbs0" || d.ABIVersion != 1 {
		t.Errorf("device = %+v", d)
	}
	if len(d.Ports) != 1 {
		t.Fatalf("ports = %+v", d.Ports)
	}
	p := d.Ports[0]
	if p.State != PortActive || p.PhysState != PhysLinkUp || p.LinkLayer != "Ethernet" ||
		p.MaxMTU.Bytes() != 4096 || p.ActiveMTU.Bytes() != 1024 || p.Netdev != "eth0" || p.GIDTblLen != 256 {
		t.Errorf("port = %+v", p)
	}
	if len(p.GIDs) != 3 {
		t.Fatalf("GIDs = %+v, want 3 (the zero entry skipped)", p.GIDs)
	}
	if g := p.GIDs[2]; g.Index != 3 || g.Type != GIDTypeRoCEv2 || g.GID.String() != "::ffff:192.0.2.1" {
		t.Errorf("GID[3] = %+v", g)
	}
}

func TestGIDLookup(t *testing.T) {
	fakeSysfs(t)
	a, err := GIDByIP(net.ParseIP("192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	// Index 1 carries the same address as RoCE v1; v2 is at 3.
	if a.Device != "mlx5_0" || a.Port != 1 || a.Index != 3 {
		t.Errorf("GIDByIP = %+v, want mlx5_0 port 1 index 3", a)
	}
	b, err := GIDByNetdev("eth0")
	if err != nil || b.Index != 3 {
		t.Errorf("GIDByNetdev(eth0) = %+v, %v; want index 3", b, err)
	}
	if _, err := GIDByIP(net.ParseIP("198.51.100.7")); !errors.Is(err, ErrNotFound) {
		t.Errorf("GIDByIP(absent) error = %v, want ErrNotFound", err)
	}
	if _, err := GIDByNetdev("eth9"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GIDByNetdev(absent) error = %v, want ErrNotFound", err)
	}
	if _, err := GIDByIP(nil); err == nil {
		t.Error("GIDByIP(nil) succeeded")
	}
}

func TestDeviceByNameMissing(t *testing.T) {
	fakeSysfs(t)
	if _, err := DeviceByName("rxe9"); !errors.Is(err, ErrNotFound) {
		t.Errorf("error = %v, want ErrNotFound", err)
	}
}

func TestDevicesPartialOnQueryError(t *testing.T) {
	fakeSysfs(t)
	for _, open := range []func(string) (uverbsDevice, error){
		func(string) (uverbsDevice, error) { return nil, os.ErrPermission },
		func(string) (uverbsDevice, error) { return &fakeDev{t: t, portErr: os.ErrPermission}, nil },
	} {
		openUverbs = open
		devs, err := Devices()
		if !errors.Is(err, os.ErrPermission) {
			t.Errorf("error = %v, want one wrapping the query failure", err)
		}
		if len(devs) != 1 || devs[0].Ports[0].State != PortActive || devs[0].Ports[0].MaxMTU != 0 ||
			len(devs[0].Ports[0].GIDs) != 3 {
			t.Errorf("want the device with its sysfs facts and no MTU, got %+v", devs)
		}
	}
}

func TestNoDevices(t *testing.T) {
	old := sysfsRoot
	sysfsRoot = t.TempDir()
	defer func() { sysfsRoot = old }()
	devs, err := Devices()
	if err != nil || len(devs) != 0 {
		t.Errorf("Devices() = %v, %v; want none and no error", devs, err)
	}
	if err := probeUverbs(); !errors.Is(err, ErrNotSupported) {
		t.Errorf("probeUverbs() = %v, want ErrNotSupported", err)
	}
}

func TestGIDJSON(t *testing.T) {
	g, _ := ParseGID("::ffff:192.0.2.7")
	b, err := json.Marshal(struct{ G GID }{g})
	if err != nil || string(b) != `{"G":"::ffff:192.0.2.7"}` {
		t.Fatalf("marshal: %s, %v", b, err)
	}
	var back struct{ G GID }
	if err := json.Unmarshal(b, &back); err != nil || back.G != g {
		t.Errorf("unmarshal: %v, %v", back.G, err)
	}
	if err := json.Unmarshal([]byte(`{"G":"nonsense"}`), &back); err == nil {
		t.Error("unmarshalled nonsense")
	}
}

func TestParseGID(t *testing.T) {
	for in, want := range map[string]string{
		"fe80:0000:0000:0000:ba59:9fff:fed4:e6b2": "fe80::ba59:9fff:fed4:e6b2",
		"0000:0000:0000:0000:0000:ffff:c000:0201": "::ffff:192.0.2.1",
		"::ffff:10.1.2.3":                         "::ffff:10.1.2.3",
	} {
		g, err := ParseGID(in)
		if err != nil || g.String() != want {
			t.Errorf("ParseGID(%q) = %v, %v; want %s", in, g, err, want)
		}
	}
	for _, bad := range []string{"", "xyz", "0000:0000"} {
		if _, err := ParseGID(bad); err == nil {
			t.Errorf("ParseGID(%q) succeeded", bad)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	if PortActive.String() != "ACTIVE" || PortDown.String() != "DOWN" || PortState(9).String() != "PortState(9)" {
		t.Error("PortState names")
	}
	if PhysLinkUp.String() != "LINK_UP" || PhysDisabled.String() != "DISABLED" {
		t.Error("PhysState names")
	}
	if MTU(3).Bytes() != 1024 || MTU(5).String() != "4096" || MTU(0).Bytes() != 0 || MTU(6).Bytes() != 0 {
		t.Error("MTU sizes")
	}
	if _, err := parseEnumAttr("bogus"); err == nil {
		t.Error("parseEnumAttr accepted garbage")
	}
}

// TestWatcherScan drives the port-diffing logic against the fake tree: a
// port leaving ACTIVE is PORT_ERR, coming back is PORT_ACTIVE, and a change
// between two non-active states is not reported.
func TestWatcherScan(t *testing.T) {
	root := fakeSysfs(t)
	state := filepath.Join(root, "class/infiniband/mlx5_0/ports/1/state")
	w := &watcher{out: make(chan Event, 8), ports: scanPorts(), links: map[string]bool{}}
	ctx := context.Background()
	expect := func(kind EventKind, st PortState) {
		t.Helper()
		select {
		case e := <-w.out:
			if e.Kind != kind || e.State != st || e.Device != "mlx5_0" || e.Port != 1 || e.Netdev != "eth0" {
				t.Errorf("event = %v, want %v state %v on mlx5_0/1 eth0", e, kind, st)
			}
		case <-time.After(time.Second):
			t.Fatalf("no %v event", kind)
		}
	}
	none := func() {
		t.Helper()
		select {
		case e := <-w.out:
			t.Errorf("unexpected event %v", e)
		default:
		}
	}
	w.scan(ctx)
	none()
	os.WriteFile(state, []byte("1: DOWN\n"), 0o644)
	os.Remove(filepath.Join(root, "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0"))
	w.scan(ctx)
	expect(EventPortDown, PortDown) // netdev remembered though its GID went away
	os.WriteFile(state, []byte("2: INIT\n"), 0o644)
	w.scan(ctx)
	none()
	os.WriteFile(state, []byte("4: ACTIVE\n"), 0o644)
	w.scan(ctx)
	expect(EventPortActive, PortActive)
}
