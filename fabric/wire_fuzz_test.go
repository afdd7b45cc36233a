//go:build linux

package fabric

import (
	"bytes"
	"strings"
	"testing"
)

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
