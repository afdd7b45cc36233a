//go:build linux

package fabric

import (
	"errors"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/verbs"
)

// TestMemRegistry: the registration cache's lookup finds the AllocMem
// region that holds a buffer, and nothing for buffers that are not wholly
// inside one; FreeMem takes only what AllocMem gave.
func TestMemRegistry(t *testing.T) {
	var m memRegistry
	var mems [][]byte
	for _, n := range []int{4096, 3 * 4096, 100} {
		mem, err := verbs.AllocMemory(n)
		if err != nil {
			t.Fatal(err)
		}
		m.add(mem, mem.Bytes())
		mems = append(mems, mem.Bytes())
	}
	t.Cleanup(func() {
		for _, b := range mems {
			m.remove(b)
		}
	})
	for i := 1; i < len(m.regions); i++ {
		if m.regions[i-1].lo >= m.regions[i].lo {
			t.Fatalf("regions out of order: %#x then %#x", m.regions[i-1].lo, m.regions[i].lo)
		}
	}
	for i, b := range mems {
		for _, s := range [][]byte{b, b[:1], b[len(b)-1:], b[len(b)/2:]} {
			r := m.find(s)
			if r == nil || r.lo != addrOf(b) {
				t.Errorf("buffer %d: a %d-byte slice at %#x not found in its region", i, len(s), addrOf(s))
			}
		}
		// Past the end (into the rest of the page, or beyond the map).
		if r := m.find(b[:cap(b)]); cap(b) > len(b) && r != nil {
			t.Errorf("buffer %d: a slice past its %d bytes was found", i, len(b))
		}
	}
	if m.find(make([]byte, 64)) != nil || m.find(nil) != nil || m.find(mems[0][:0]) != nil {
		t.Error("Go memory or an empty slice was found in the registry")
	}
	if err := m.remove(mems[1][:4096]); !errors.Is(err, ErrInvalid) {
		t.Errorf("FreeMem of part of a region: %v", err)
	}
	if err := m.remove(make([]byte, 4096)); !errors.Is(err, ErrInvalid) {
		t.Errorf("FreeMem of Go memory: %v", err)
	}
	if err := m.remove(mems[1]); err != nil || m.find(mems[1]) != nil || len(m.regions) != 2 {
		t.Errorf("FreeMem: %v, %d regions left", err, len(m.regions))
	}
	mems = append(mems[:1], mems[2:]...)
}

func TestRemoteMemBinary(t *testing.T) {
	m := RemoteMem{Addr: 0x7f00_1234_5678, Len: 1 << 20, Key: 0xabcdef}
	b, err := m.MarshalBinary()
	if err != nil || len(b) != RemoteMemSize {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
	var got RemoteMem
	if err := got.UnmarshalBinary(b); err != nil || got != m {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if err := got.UnmarshalBinary(b[:19]); !errors.Is(err, ErrInvalid) {
		t.Errorf("short form: %v", err)
	}
}

func TestProviderOption(t *testing.T) {
	t.Setenv("RIVET_PROVIDER", "VERBS")
	o, err := buildOptions(nil)
	if err != nil || o.provider != "verbs" {
		t.Errorf("RIVET_PROVIDER=VERBS: %q, %v", o.provider, err)
	}
	if o, _ := buildOptions([]Option{WithProvider("shm")}); o.provider != "shm" {
		t.Errorf("the option did not win over the environment: %q", o.provider)
	}
	if _, err := buildOptions([]Option{WithProvider("tcp")}); !errors.Is(err, ErrInvalid) {
		t.Errorf("provider tcp: %v", err)
	}
	o = options{device: "rxe0, rxe1"}
	if a, b, c := o.pickDevice(0), o.pickDevice(1), o.pickDevice(2); a != "rxe0" || b != "rxe1" || c != "rxe0" {
		t.Errorf("device list picks %q %q %q", a, b, c)
	}
}

func TestVerbsTimeoutOption(t *testing.T) {
	o, err := buildOptions(nil)
	if c := o.qpConfig(); err != nil || c.Timeout != vTimeout || c.RetryCount != verbs.DefaultRetryCount {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	t.Setenv("RIVET_VERBS_TIMEOUT", "17")
	t.Setenv("RIVET_VERBS_RETRY", "3")
	o, err = buildOptions(nil)
	if c := o.qpConfig(); err != nil || c.Timeout != 17 || c.RetryCount != 3 {
		t.Errorf("RIVET_VERBS_TIMEOUT=17 RIVET_VERBS_RETRY=3: %+v, %v", c, err)
	}
	o, _ = buildOptions([]Option{WithVerbsTimeout(16*time.Millisecond, 0)})
	if c := o.qpConfig(); c.Timeout != 12 || c.RetryCount != verbs.DefaultRetryCount {
		t.Errorf("16 ms (rounded up to 4.096 µs × 2^12, 16.8 ms) did not win over the environment: %+v", c)
	}
	for ack, want := range map[time.Duration]uint8{time.Nanosecond: 1, 8192 * time.Nanosecond: 1, 8193 * time.Nanosecond: 2,
		268435456 * time.Nanosecond: 16, 4096 << 31 * time.Nanosecond: 31} {
		if got, ok := ackExponent(ack); !ok || got != want {
			t.Errorf("ackExponent(%v) = %d, %v; want %d", ack, got, ok, want)
		}
	}
	for _, bad := range [][2]string{{"RIVET_VERBS_TIMEOUT", "32"}, {"RIVET_VERBS_RETRY", "7"}, {"RIVET_VERBS_RETRY", "x"}} {
		t.Setenv(bad[0], bad[1])
		if _, err := buildOptions(nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s=%s: %v", bad[0], bad[1], err)
		}
		t.Setenv(bad[0], "")
	}
	for _, bad := range []Option{WithVerbsTimeout(time.Second, 7), WithVerbsTimeout(-time.Millisecond, 0), WithVerbsTimeout(3*time.Hour, 0)} {
		if _, err := buildOptions([]Option{bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("a bad WithVerbsTimeout: %v", err)
		}
	}
}
