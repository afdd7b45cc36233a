//go:build linux

package fabric

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/rdma"
	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() { progs.Add("compactframes", progCompactFrames) }

// sentPackets is what port 1 of device dev has sent. The kernel keeps a
// device's counters for their lifespan (10 ms by default) before it
// reads them again, so this waits that long, and two jiffies more, first.
func sentPackets(dev string) int {
	dir := "/sys/class/infiniband/" + dev + "/ports/1/hw_counters/"
	counter := func(name string) int {
		b, err := os.ReadFile(dir + name)
		must(err, "reading rxe's counters")
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		must(err, "rxe's counter "+name)
		return n
	}
	time.Sleep(time.Duration(counter("lifespan"))*time.Millisecond + 20*time.Millisecond)
	return counter("sent_pkts")
}

// progCompactFrames: an eager message's header rides in a send's
// immediate data when it can (wire.Compact), so that a message of
// exactly the MTU is one packet, not two. Rank 0 streams 256 messages to
// rank 1 at each of: a size that is one packet with or without a header
// (MTU − 24), exactly the MTU, the MTU with a tag too large for the
// compact form, and the MTU on a communicator whose ranks are not the
// world's (the compact form names the sender by its world rank, so
// there it must not be used); and 8 bytes, which go inline. Every
// message must arrive whole with its source and tag; the device (both
// ranks share it) must send about as many packets for MTU-sized
// messages as for the one-packet size, and about one more a message in
// the two cases that must fall back to the header.
func progCompactFrames(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me := w.Rank()
	dev := ep.Device()
	if dev == "" {
		failf("not over verbs")
	}
	d, err := hw.DeviceByName(dev)
	must(err, "device")
	mtu := d.Ports[0].ActiveMTU.Bytes()
	if mtu < 256 || mtu > rdma.Eager {
		failf("an MTU of %d bytes: not a size this test knows", mtu)
	}
	// Reversed ranks: world rank 0 is rank 1 here.
	rev, err := w.Split(ctx, 0, -me)
	must(err, "split")
	if rev.Rank() != 1-me {
		failf("split: rank %d, want %d", rev.Rank(), 1-me)
	}
	const n = 256
	buf, want := make([]byte, mtu), make([]byte, mtu)
	sync := func() {
		_, err := w.Sendrecv(ctx, []byte{1}, 1-me, 9, buf[:1], 1-me, 9)
		must(err, "sendrecv")
	}
	sync() // connected
	// stream sends n messages of size bytes with tag on c, from world
	// rank 0 to world rank 1, and returns the packets the device sent
	// meanwhile; receives name any source and tag.
	stream := func(c *Comm, size, tag int) int {
		sync()
		before := sentPackets(dev)
		peer := 1 - c.Rank() // the other's rank in c
		for i := range n {
			for k := range want[:size] {
				want[k] = byte(i + k)
			}
			if me == 0 {
				must(c.Send(ctx, want[:size], peer, tag), "send")
				continue
			}
			st, err := c.Recv(ctx, buf, AnySource, AnyTag)
			must(err, "recv")
			if st.Source != peer || st.Tag != tag || st.Count != size || !bytes.Equal(buf[:size], want[:size]) {
				failf("message %d of %d bytes, tag %d: source %d, tag %d, %d bytes, first wrong byte %d; want source %d",
					i, size, tag, st.Source, st.Tag, st.Count, commonPrefix(buf[:size], want[:size]), peer)
			}
		}
		sync() // rank 1 has them all
		return sentPackets(dev) - before
	}
	stream(w, 8, 3) // inline
	one := stream(w, mtu-24, 3)
	exact := stream(w, mtu, 3)
	bigTag := stream(w, mtu, 1<<17)
	reversed := stream(rev, mtu, 3)
	if me == 0 {
		if one < n {
			failf("%d messages of one packet: the device counted %d packets", n, one)
		}
		if exact-one > n/2 {
			failf("%d messages of the MTU (%d bytes) took %d packets, %d of one packet %d: their headers did not ride in the immediate data",
				n, mtu, exact, n, one)
		}
		if bigTag-one < n/2 || reversed-one < n/2 {
			failf("%d messages of the MTU took %d packets with a 17-bit tag and %d on reversed ranks, %d of one packet %d: "+
				"the compact form was used where it cannot say the tag or the source", n, bigTag, reversed, n, one)
		}
	}
	return nil
}

// commonPrefix is how many leading bytes a and b share.
func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// TestVerbsCompactFrames: see progCompactFrames. Without heartbeats,
// whose reads would add packets of their own.
func TestVerbsCompactFrames(t *testing.T) {
	devs := testutil.RXEDevices(t)
	runOK(t, 2, "compactframes", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+devs[0], "RIVET_FT_HEARTBEAT=0")
}
