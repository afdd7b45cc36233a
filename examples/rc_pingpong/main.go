//go:build linux

// Rc_pingpong is ibv_rc_pingpong (rdma-core's libibverbs example) in Go on
// Rivet's verbs: same flags, same TCP exchange of QP addresses, same output,
// so either side can be the C program.
//
//	rc_pingpong -d rxe0 -g 1                  # server
//	rc_pingpong -d rxe0 -g 1 127.0.0.1        # client
//
// Unlike the C program it checks every message it receives: the C side
// sends its buffer filled with 0x7b, and so does this one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/verbs"
)

const (
	sendID = 1
	recvID = 2
	fill   = 0x7b // what ibv_rc_pingpong fills its buffer with
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rc_pingpong:", err)
		os.Exit(1)
	}
}

type options struct {
	port, ibPort, size, mtu, rxDepth, iters, gidIdx int
	dev, server                                     string
	events                                          bool
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("rc_pingpong", flag.ContinueOnError)
	fs.IntVar(&o.port, "p", 18515, "listen on/connect to TCP `port`")
	fs.StringVar(&o.dev, "d", "", "use RDMA `device` (default: first active)")
	fs.IntVar(&o.ibPort, "i", 1, "use `port` of the device")
	fs.IntVar(&o.size, "s", 4096, "`size` of message to exchange")
	fs.IntVar(&o.mtu, "m", 1024, "path `MTU`")
	fs.IntVar(&o.rxDepth, "r", 500, "number of receives to post at a time")
	fs.IntVar(&o.iters, "n", 1000, "number of exchanges")
	fs.IntVar(&o.gidIdx, "g", -1, "local port GID `index` (default: the port's IPv4 RoCE v2 GID)")
	fs.BoolVar(&o.events, "e", false, "sleep on CQ events (default poll)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return errors.New("at most one server address")
	}
	o.server = fs.Arg(0)
	if o.size < 1 || o.iters < 1 || o.rxDepth < 2 {
		return errors.New("size, iterations and rx depth must be positive (rx depth at least 2)")
	}
	mtu := hw.MTU(0)
	for m := hw.MTU(1); m <= 5; m++ {
		if m.Bytes() == o.mtu {
			mtu = m
		}
	}
	if mtu == 0 {
		return fmt.Errorf("MTU %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	}
	return pingpong(ctx, o, mtu, out)
}

func pingpong(ctx context.Context, o options, mtu hw.MTU, out io.Writer) error {
	dev, err := verbs.Open(o.dev)
	if err != nil {
		return err
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Close()
	// The send half and the receive half of one region, so that what
	// arrives can be checked.
	mr, err := pd.Alloc(2*o.size, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer mr.Close()
	buf := mr.Bytes()
	for i := range buf[:o.size] {
		buf[i] = fill
	}
	var ch *verbs.CompChannel
	if o.events {
		if ch, err = dev.NewCompChannel(); err != nil {
			return err
		}
		defer ch.Close()
	}
	cq, err := dev.NewCQ(verbs.CQConfig{Size: o.rxDepth + 1, Channel: ch})
	if err != nil {
		return err
	}
	defer cq.Close()
	inline := 0
	if o.size <= 256 {
		inline = o.size
	}
	qp, err := pd.NewQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 1, MaxRecvWR: o.rxDepth,
		MaxInline: inline, Port: o.ibPort, Access: verbs.AccessLocalWrite})
	if err != nil {
		return err
	}
	defer qp.Close()

	recv := verbs.RecvWR{ID: recvID, Local: []verbs.SGE{{MR: mr, Offset: uint64(o.size), Length: uint32(o.size)}}}
	for i := 0; i < o.rxDepth; i++ {
		if err := qp.PostRecv(recv); err != nil {
			return err
		}
	}
	gid, err := localGID(dev, o)
	if err != nil {
		return err
	}
	local := qp.Endpoint(gid)
	fmt.Fprintf(out, "  local address:  %s\n", describe(local))
	var remote verbs.Endpoint
	if o.server != "" {
		remote, err = clientExchange(ctx, o, local)
	} else {
		remote, err = serverExchange(ctx, o, local, func(r verbs.Endpoint) error {
			return qp.Connect(r, connectConfig(o, mtu))
		})
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  remote address: %s\n", describe(remote))
	if o.server != "" {
		if err := qp.Connect(remote, connectConfig(o, mtu)); err != nil {
			return err
		}
	}

	flags := verbs.Signaled
	if inline > 0 {
		flags |= verbs.Inline
	}
	send := verbs.SendWR{ID: sendID, Op: verbs.OpSend, Flags: flags, Local: []verbs.SGE{{MR: mr, Length: uint32(o.size)}}}
	start := time.Now()
	pending := 0
	if o.server != "" {
		if err := qp.PostSend(send); err != nil {
			return err
		}
		pending = sendID | recvID
	} else {
		pending = recvID
	}
	routs, scnt, rcnt := o.rxDepth, 0, 0
	wcs := make([]verbs.WorkCompletion, 2)
	for scnt < o.iters || rcnt < o.iters {
		var n int
		if o.events {
			n, err = cq.Wait(ctx, wcs)
		} else {
			n, err = cq.Poll(wcs)
		}
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			if err := wc.Err(); err != nil {
				return err
			}
			switch wc.ID {
			case sendID:
				scnt++
			case recvID:
				got := buf[o.size : 2*o.size]
				for i, b := range got {
					if b != fill {
						return fmt.Errorf("message %d: byte %d is %#x, want %#x", rcnt, i, b, fill)
					}
				}
				clear(got)
				rcnt++
				if routs--; routs <= 1 {
					for ; routs < o.rxDepth; routs++ {
						if err := qp.PostRecv(recv); err != nil {
							return err
						}
					}
				}
			default:
				return fmt.Errorf("completion for unknown wr_id %d", wc.ID)
			}
			pending &^= int(wc.ID)
			if scnt < o.iters && pending == 0 {
				if err := qp.PostSend(send); err != nil {
					return err
				}
				pending = sendID | recvID
			}
		}
	}
	elapsed := time.Since(start)
	usec := float64(elapsed.Microseconds())
	bytes := int64(o.size) * int64(o.iters) * 2
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec/1e6, usec/float64(o.iters))
	return nil
}

func connectConfig(o options, mtu hw.MTU) verbs.ConnectConfig {
	return verbs.ConnectConfig{GIDIndex: o.gidIdx, MTU: mtu, HopLimit: 1, MaxDestRdAtomic: 1, MaxRdAtomic: 1}
}

// localGID is the GID at -g, or the IPv4 RoCE v2 GID of the port's netdev.
func localGID(dev *verbs.Context, o options) (hw.GID, error) {
	d, err := hw.DeviceByName(dev.Name())
	if err != nil {
		return hw.GID{}, err
	}
	for _, p := range d.Ports {
		if p.Number != o.ibPort {
			continue
		}
		for _, g := range p.GIDs {
			if (o.gidIdx >= 0 && g.Index == o.gidIdx) || (o.gidIdx < 0 && g.Type == hw.GIDTypeRoCEv2 && g.GID.IsIPv4()) {
				return g.GID, nil
			}
		}
	}
	return hw.GID{}, fmt.Errorf("%s port %d: no GID at index %d", dev.Name(), o.ibPort, o.gidIdx)
}

func describe(e verbs.Endpoint) string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", e.LID, e.QPN, e.PSN, e.GID)
}

// The exchange: each side sends "LLLL:QQQQQQ:PPPPPP:GGG…G" (LID, QPN, PSN in
// hex, the GID's 16 bytes as 32 hex digits) NUL-terminated, 53 bytes in
// all; the client then sends "done".
const wireLen = len("0000:000000:000000:00000000000000000000000000000000") + 1

func encode(e verbs.Endpoint) []byte {
	b := fmt.Appendf(nil, "%04x:%06x:%06x:%x", e.LID, e.QPN, e.PSN, e.GID[:])
	return append(b, 0)
}

func decode(b []byte) (verbs.Endpoint, error) {
	var e verbs.Endpoint
	if len(b) != wireLen || b[wireLen-1] != 0 || b[4] != ':' || b[11] != ':' || b[18] != ':' {
		return e, fmt.Errorf("malformed address %q", b)
	}
	fields := []struct {
		s    []byte
		dst  *uint32
		bits int
	}{{b[0:4], nil, 16}, {b[5:11], &e.QPN, 24}, {b[12:18], &e.PSN, 24}}
	for i, f := range fields {
		v, err := strconv.ParseUint(string(f.s), 16, f.bits)
		if err != nil {
			return e, fmt.Errorf("malformed address %q: %w", b, err)
		}
		if i == 0 {
			e.LID = uint16(v)
		} else {
			*f.dst = uint32(v)
		}
	}
	for i := range e.GID {
		v, err := strconv.ParseUint(string(b[19+2*i:21+2*i]), 16, 8)
		if err != nil {
			return e, fmt.Errorf("malformed GID in %q", b)
		}
		e.GID[i] = byte(v)
	}
	return e, nil
}

func clientExchange(ctx context.Context, o options, local verbs.Endpoint) (verbs.Endpoint, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(o.server, strconv.Itoa(o.port)))
	if err != nil {
		return verbs.Endpoint{}, err
	}
	defer conn.Close()
	if _, err := conn.Write(encode(local)); err != nil {
		return verbs.Endpoint{}, err
	}
	msg := make([]byte, wireLen)
	if _, err := io.ReadFull(conn, msg); err != nil {
		return verbs.Endpoint{}, fmt.Errorf("reading the server's address: %w", err)
	}
	if _, err := conn.Write([]byte("done\x00")); err != nil {
		return verbs.Endpoint{}, err
	}
	return decode(msg)
}

func serverExchange(ctx context.Context, o options, local verbs.Endpoint, connect func(verbs.Endpoint) error) (verbs.Endpoint, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(o.port))
	if err != nil {
		return verbs.Endpoint{}, err
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	conn, err := l.Accept()
	stop()
	l.Close()
	if err != nil {
		return verbs.Endpoint{}, err
	}
	defer conn.Close()
	msg := make([]byte, wireLen)
	if _, err := io.ReadFull(conn, msg); err != nil {
		return verbs.Endpoint{}, fmt.Errorf("reading the client's address: %w", err)
	}
	remote, err := decode(msg)
	if err != nil {
		return remote, err
	}
	// As in the C server: connect before answering, so the client never
	// sends to a QP that is not ready.
	if err := connect(remote); err != nil {
		return remote, err
	}
	if _, err := conn.Write(encode(local)); err != nil {
		return remote, err
	}
	conn.Read(msg) // "done"; the C client closes right after
	return remote, nil
}
