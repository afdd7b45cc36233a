//go:build linux

package hw

import (
	"encoding/hex"
	"fmt"
	"net"
	"strings"
)

// GID is a 128-bit RDMA global identifier. On RoCE v2 with IPv4 it is the
// IPv4-mapped IPv6 address of the netdev (::ffff:a.b.c.d).
type GID [16]byte

// ParseGID parses the sysfs form "fe80:0000:0000:0000:5054:00ff:fe12:3456"
// or any IPv6 text form.
func ParseGID(s string) (GID, error) {
	var g GID
	s = strings.TrimSpace(s)
	if h := strings.ReplaceAll(s, ":", ""); len(h) == 32 {
		if _, err := hex.Decode(g[:], []byte(h)); err == nil {
			return g, nil
		}
	}
	ip := net.ParseIP(s)
	if ip == nil {
		return g, fmt.Errorf("invalid GID %q", s)
	}
	copy(g[:], ip.To16())
	return g, nil
}

// IsZero reports whether g is the all-zero (unused) GID.
func (g GID) IsZero() bool { return g == GID{} }

// IP returns g as an IP address; for an IPv4-mapped GID, the IPv4 address.
func (g GID) IP() net.IP { return net.IP(g[:]) }

// IsIPv4 reports whether g is an IPv4-mapped GID.
func (g GID) IsIPv4() bool { return g.IP().To4() != nil }

// String formats g as ibv_devinfo does (IPv6 text, "::ffff:192.0.2.1").
func (g GID) String() string {
	if g.IsIPv4() {
		return "::ffff:" + g.IP().To4().String()
	}
	return g.IP().String()
}

// MarshalText makes GID print as text in JSON.
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText parses what MarshalText (or sysfs) writes.
func (g *GID) UnmarshalText(b []byte) error {
	v, err := ParseGID(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// GIDType is the RoCE flavour of a GID table entry.
type GIDType string

// GID types as sysfs names them.
const (
	GIDTypeIB     GIDType = "IB/RoCE v1"
	GIDTypeRoCEv2 GIDType = "RoCE v2"
)

// GIDEntry is one populated entry of a port's GID table.
type GIDEntry struct {
	Index  int
	GID    GID
	Type   GIDType
	Netdev string // the netdev the entry belongs to; empty on InfiniBand
}

// GIDAddr locates a GID: the device, port and table index to put into a
// queue pair's address vector (sgid_index).
type GIDAddr struct {
	Device string
	Port   int
	GIDEntry
}

// GIDByIP returns the RoCE v2 GID that carries ip, on any device.
func GIDByIP(ip net.IP) (GIDAddr, error) {
	if ip == nil {
		return GIDAddr{}, fmt.Errorf("GID lookup: nil IP")
	}
	want := ip.To16()
	return findGID(func(e GIDEntry) bool { return e.GID.IP().Equal(want) },
		fmt.Sprintf("RoCE v2 GID for %s", ip))
}

// GIDByNetdev returns the IPv4-mapped RoCE v2 GID of netdev, the one RoCE v2
// traffic over IPv4 uses; failing that, its first RoCE v2 GID.
func GIDByNetdev(netdev string) (GIDAddr, error) {
	what := "RoCE v2 GID on netdev " + netdev
	if a, err := findGID(func(e GIDEntry) bool { return e.Netdev == netdev && e.GID.IsIPv4() }, what); err == nil {
		return a, nil
	}
	return findGID(func(e GIDEntry) bool { return e.Netdev == netdev }, what)
}

func findGID(match func(GIDEntry) bool, what string) (GIDAddr, error) {
	devs, err := Devices()
	for _, d := range devs {
		for _, p := range d.Ports {
			for _, e := range p.GIDs {
				if e.Type == GIDTypeRoCEv2 && match(e) {
					return GIDAddr{Device: d.Name, Port: p.Number, GIDEntry: e}, nil
				}
			}
		}
	}
	if err != nil {
		return GIDAddr{}, fmt.Errorf("%s: %w", what, err)
	}
	return GIDAddr{}, fmt.Errorf("%s: %w", what, ErrNotFound)
}
