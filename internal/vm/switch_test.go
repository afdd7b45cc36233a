//go:build linux

package vm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"
)

// testNode is a test's stand-in for node i's qemu: a socket bound where
// qemu's is, not connected (qemu sends with sendto), and a function that
// sends to its port.
func testNode(t *testing.T, s *vswitch, i int) (*net.UnixConn, func([]byte) error) {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.nodePath(i), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	port := &net.UnixAddr{Name: s.portPath(i), Net: "unixgram"}
	return c, func(b []byte) error {
		_, err := c.WriteToUnix(b, port)
		return err
	}
}

// ethFrame is a frame for node to, numbered k.
func ethFrame(to, k int) []byte {
	b := make([]byte, 1000)
	copy(b, nodeMAC(to))
	binary.BigEndian.PutUint32(b[14:], uint32(k))
	return b
}

// TestSwitchBuffers: a burst far larger than qemu's socket holds (10
// datagrams) reaches a node that reads late, whole and in order.
func TestSwitchBuffers(t *testing.T) {
	s, err := newSwitch(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	_, send := testNode(t, s, 1)
	b, _ := testNode(t, s, 2)
	const n = 1000
	go func() {
		for k := 0; k < n; k++ {
			if err := send(ethFrame(2, k)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond) // the burst piles up at node 2's port
	read := make(chan error, 1)
	go func() {
		buf := make([]byte, 2048)
		for k := 0; k < n; k++ {
			m, err := b.Read(buf)
			if err != nil {
				read <- err
				return
			}
			if got := int(binary.BigEndian.Uint32(buf[14:])); m != 1000 || got != k || !bytes.Equal(buf[:6], nodeMAC(2)) {
				read <- fmt.Errorf("frame %d: %d bytes, numbered %d", k, m, got)
				return
			}
		}
		read <- nil
	}()
	// A dropped frame would leave the reader waiting: fail at the drop.
	for {
		select {
		case err := <-read:
			if err != nil {
				t.Fatal(err)
			}
			if d := s.dropped.Load(); d != 0 {
				t.Errorf("%d frames dropped", d)
			}
			return
		case <-time.After(10 * time.Millisecond):
			if d := s.dropped.Load(); d != 0 {
				t.Fatalf("%d of %d frames dropped", d, n)
			}
		}
	}
}

// TestSwitchStoppedNode: a node that never reads loses what its queue
// cannot hold, holds up no other node, and the switch still closes.
func TestSwitchStoppedNode(t *testing.T) {
	s, err := newSwitch(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	_, send := testNode(t, s, 1)
	testNode(t, s, 2)
	c, _ := testNode(t, s, 3)
	const n = portQueue + 500
	for k := 0; k < n; k++ {
		if err := send(ethFrame(2, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := send(ethFrame(3, 7)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	if _, err := c.Read(buf); err != nil || binary.BigEndian.Uint32(buf[14:]) != 7 {
		t.Fatalf("node 3: %v, frame %d", err, binary.BigEndian.Uint32(buf[14:]))
	}
	// Node 2 holds its socket's 10 (or 11) and the port its queue: the
	// rest were dropped, as they arrived.
	if d := s.dropped.Load(); d < n-portQueue-20 {
		t.Errorf("%d frames dropped of %d, want about %d", d, n, n-portQueue-11)
	}
	s.close()
}
