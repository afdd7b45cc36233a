//go:build linux

package hw

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"

	"github.com/rivet-hpc/rivet/internal/uverbs"
)

// sysfsRoot is a variable so tests can point it at a fake tree.
var sysfsRoot = "/sys"

// Device is an RDMA device as the kernel shows it.
type Device struct {
	Name         string // IB device name, e.g. "rxe0"
	NodeType     string // "CA", "RNIC", ...
	NodeGUID     string // "5054:00ff:fe12:3456"
	SysImageGUID string
	FWVersion    string
	Driver       string   // kernel driver, e.g. "rxe", "mlx5_core"
	Parent       string   // the netdev a software device (rxe, siw) sits on
	Uverbs       string   // uverbs character device path, e.g. /dev/infiniband/uverbs0
	ABIVersion   int      // the driver's uverbs ABI version
	CharDevices  []string // every character device of the device (uverbs, umad, issm, rdma_cm)
	Ports        []Port
}

// Port is one port of a device.
type Port struct {
	Number    int
	State     PortState
	PhysState PhysState
	LinkLayer string // "Ethernet" or "InfiniBand"
	Rate      string // "10 Gb/sec (4X SDR)"
	LID       uint16
	MaxMTU    MTU // from QUERY_PORT; 0 if the device could not be queried
	ActiveMTU MTU
	GIDTblLen int
	Netdev    string // the Ethernet netdev of a RoCE port
	GIDs      []GIDEntry
}

// uverbsDevice is what hw asks of a device through uverbs: what sysfs
// lacks (MTUs, table lengths) and what sysfs gives slowly (the GID table).
type uverbsDevice interface {
	QueryPort(port uint8) (uverbs.PortAttr, error)
	QueryGIDTable(driverID uint32, max int) ([]uverbs.GIDEntry, error)
	Close() error
}

// openUverbs opens a device's uverbs context; a variable for tests.
var openUverbs = func(path string) (uverbsDevice, error) {
	c, err := uverbs.Open(path)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// interfaceName names a netdev by index; a variable for tests.
var interfaceName = func(index int) (string, error) {
	ifi, err := net.InterfaceByIndex(index)
	if err != nil {
		return "", err
	}
	return ifi.Name, nil
}

// driverIDs maps kernel drivers to the RDMA_DRIVER_ID an ioctl must carry.
// Devices of other drivers have their GID tables read from sysfs.
var driverIDs = map[string]uint32{"rxe": uverbs.DriverRXE}

// Devices lists the RDMA devices, sorted by name. If some attribute of a
// device cannot be read, the devices are still returned, as complete as
// possible, along with an error describing what is missing.
func Devices() ([]Device, error) {
	names, err := readDirNames(filepath.Join(sysfsRoot, "class/infiniband"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing RDMA devices: %w", err)
	}
	uv := uverbsDevices()
	var devs []Device
	var errs []error
	for _, name := range names {
		d, err := readDevice(name, uv[name])
		if err != nil {
			errs = append(errs, err)
		}
		devs = append(devs, d)
	}
	return devs, errors.Join(errs...)
}

// DeviceByName returns one device; the error wraps ErrNotFound if it does
// not exist.
func DeviceByName(name string) (Device, error) {
	if _, err := os.Stat(filepath.Join(sysfsRoot, "class/infiniband", name)); err != nil {
		return Device{}, fmt.Errorf("RDMA device %q: %w", name, ErrNotFound)
	}
	return readDevice(name, uverbsDevices()[name])
}

// uverbsDevices maps IB device names to their uverbsN names.
func uverbsDevices() map[string]string {
	m := map[string]string{}
	dir := filepath.Join(sysfsRoot, "class/infiniband_verbs")
	names, _ := readDirNames(dir)
	for _, n := range names {
		if ib, err := readAttr(filepath.Join(dir, n, "ibdev")); err == nil {
			m[ib] = n
		}
	}
	return m
}

func readDevice(name, uverbsName string) (Device, error) {
	dir := filepath.Join(sysfsRoot, "class/infiniband", name)
	d := Device{Name: name}
	var errs []error
	if nt, err := readAttr(filepath.Join(dir, "node_type")); err == nil {
		_, d.NodeType, _ = strings.Cut(nt, ": ")
	}
	d.NodeGUID, _ = readAttr(filepath.Join(dir, "node_guid"))
	d.SysImageGUID, _ = readAttr(filepath.Join(dir, "sys_image_guid"))
	d.FWVersion, _ = readAttr(filepath.Join(dir, "fw_ver"))
	d.Parent, _ = readAttr(filepath.Join(dir, "parent"))
	if link, err := os.Readlink(filepath.Join(dir, "device/driver")); err == nil {
		d.Driver = filepath.Base(link)
	} else if d.Parent != "" {
		// Software devices have no bus device. The "parent" attribute
		// (the netdev) is rxe's own (rxe_attr_group).
		d.Driver = "rxe"
	}
	if uverbsName != "" {
		d.Uverbs = "/dev/infiniband/" + uverbsName
		if v, err := readAttr(filepath.Join(sysfsRoot, "class/infiniband_verbs", uverbsName, "abi_version")); err == nil {
			d.ABIVersion, _ = strconv.Atoi(v)
		}
	}
	if sysfsRoot == "/sys" {
		d.CharDevices = rdmamap.GetRdmaCharDevices(name)
	}
	var dev uverbsDevice
	if d.Uverbs != "" {
		var err error
		if dev, err = openUverbs(d.Uverbs); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		} else {
			defer dev.Close()
		}
	}
	ports, err := readDirNames(filepath.Join(dir, "ports"))
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: listing ports: %w", name, err))
	}
	for _, pn := range ports {
		num, err := strconv.Atoi(pn)
		if err != nil {
			continue
		}
		p, err := readPort(d, num, dev)
		if err != nil {
			errs = append(errs, err)
		}
		d.Ports = append(d.Ports, p)
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Number < d.Ports[j].Number })
	if !queryGIDs(&d, dev) {
		for i := range d.Ports {
			d.Ports[i].GIDs = readGIDs(filepath.Join(dir, "ports", strconv.Itoa(d.Ports[i].Number)))
		}
	}
	for i := range d.Ports {
		p := &d.Ports[i]
		for _, g := range p.GIDs {
			if g.Netdev != "" {
				p.Netdev = g.Netdev
				break
			}
		}
		if p.Netdev == "" && p.LinkLayer == "Ethernet" {
			p.Netdev = d.Parent
		}
	}
	return d, errors.Join(errs...)
}

// readPort reads a port's sysfs attributes and, if dev is not nil, its
// MTUs and GID table length.
func readPort(d Device, num int, dev uverbsDevice) (Port, error) {
	dir := filepath.Join(sysfsRoot, "class/infiniband", d.Name, "ports", strconv.Itoa(num))
	p := Port{Number: num}
	var errs []error
	if s, err := readAttr(filepath.Join(dir, "state")); err == nil {
		v, err := parseEnumAttr(s)
		p.State = PortState(v)
		errs = append(errs, err)
	} else {
		errs = append(errs, err)
	}
	if s, err := readAttr(filepath.Join(dir, "phys_state")); err == nil {
		v, err := parseEnumAttr(s)
		p.PhysState = PhysState(v)
		errs = append(errs, err)
	}
	p.LinkLayer, _ = readAttr(filepath.Join(dir, "link_layer"))
	p.Rate, _ = readAttr(filepath.Join(dir, "rate"))
	if s, err := readAttr(filepath.Join(dir, "lid")); err == nil {
		v, _ := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 16)
		p.LID = uint16(v)
	}
	if dev != nil {
		a, err := dev.QueryPort(uint8(num))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s port %d: %w", d.Name, num, err))
		} else {
			p.MaxMTU, p.ActiveMTU, p.GIDTblLen = MTU(a.MaxMTU), MTU(a.ActiveMTU), int(a.GIDTableLen)
		}
	}
	return p, errors.Join(errs...)
}

// queryGIDs fills the ports' GID tables with one QUERY_GID_TABLE ioctl and
// reports whether it could. sysfs has the same facts in one file per entry,
// used or not (1024 on rxe, 0.3–0.6 s of start-up under emulation); it stays
// the fallback for kernels before 5.10 and drivers without a known id.
func queryGIDs(d *Device, dev uverbsDevice) bool {
	id, ok := driverIDs[d.Driver]
	if dev == nil || !ok || len(d.Ports) == 0 {
		return false
	}
	max := 0
	for _, p := range d.Ports {
		if p.GIDTblLen == 0 {
			return false // the port query failed
		}
		max += p.GIDTblLen
	}
	entries, err := dev.QueryGIDTable(id, max)
	if err != nil {
		return false
	}
	names := map[uint32]string{}
	for _, e := range entries {
		g := GIDEntry{Index: int(e.GIDIndex), GID: GID(e.GID), Type: GIDTypeIB}
		if g.GID.IsZero() {
			continue
		}
		if e.GIDType == uverbs.GIDTypeRoCEv2 {
			g.Type = GIDTypeRoCEv2
		}
		if e.NetdevIfindex != 0 {
			name, seen := names[e.NetdevIfindex]
			if !seen {
				name, _ = interfaceName(int(e.NetdevIfindex))
				names[e.NetdevIfindex] = name
			}
			g.Netdev = name
		}
		for i := range d.Ports {
			if d.Ports[i].Number == int(e.PortNum) {
				d.Ports[i].GIDs = append(d.Ports[i].GIDs, g)
			}
		}
	}
	for i := range d.Ports {
		g := d.Ports[i].GIDs
		sort.Slice(g, func(a, b int) bool { return g[a].Index < g[b].Index })
	}
	return true
}

// readGIDs returns the populated entries of a port's GID table from sysfs.
// The kernel fails reads of types/N for unused entries, which is how they
// are skipped.
func readGIDs(portDir string) []GIDEntry {
	names, _ := readDirNames(filepath.Join(portDir, "gids"))
	var out []GIDEntry
	for _, n := range names {
		idx, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		s, err := readAttr(filepath.Join(portDir, "gids", n))
		if err != nil {
			continue
		}
		g, err := ParseGID(s)
		if err != nil || g.IsZero() {
			continue
		}
		typ, err := readAttr(filepath.Join(portDir, "gid_attrs/types", n))
		if err != nil {
			continue
		}
		e := GIDEntry{Index: idx, GID: g, Type: GIDType(typ)}
		e.Netdev, _ = readAttr(filepath.Join(portDir, "gid_attrs/ndevs", n))
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

func readAttr(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}
