//go:build linux

package fabric

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParseHostlist: any string gives hosts or an error — no panic, no
// runaway expansion — and every host is a non-empty name without the
// list's syntax.
func FuzzParseHostlist(f *testing.F) {
	for _, s := range []string{"nid[001-003,010],login1", "a[1-2]b[3-4]", "node", "x[", "x]", "a[0-65536]b[0-65536]", "[1-3]", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHostlist(s)
		if err != nil {
			return
		}
		if len(hosts) == 0 || len(hosts) > maxHosts {
			t.Fatalf("%q: %d hosts", s, len(hosts))
		}
		for _, h := range hosts {
			if h == "" || strings.ContainsAny(h, "[],") {
				t.Fatalf("%q gave host %q", s, h)
			}
		}
	})
}

// FuzzRemoteMem: UnmarshalBinary takes exactly RemoteMemSize bytes, and
// what it takes marshals back to the same bytes.
func FuzzRemoteMem(f *testing.F) {
	f.Add(make([]byte, RemoteMemSize))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m RemoteMem
		if err := m.UnmarshalBinary(b); err != nil {
			if len(b) == RemoteMemSize {
				t.Fatalf("%x: %v", b, err)
			}
			return
		}
		out, err := m.MarshalBinary()
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("%x → %+v → %x, %v", b, m, out, err)
		}
	})
}

// FuzzNotice: a launcher's failure notice parses or is refused, never a
// panic.
func FuzzNotice(f *testing.F) {
	f.Add("failed rank=2 status=137 time=1700000000000000000")
	f.Add("failed rank=x status=1 time=0")
	f.Fuzz(func(t *testing.T, line string) {
		rank, _, _, ok := parseNotice(line)
		if ok && !strings.HasPrefix(strings.TrimSpace(line), "failed") {
			t.Fatalf("%q accepted as rank %d", line, rank)
		}
	})
}
