package pmix

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestFlex: flex128 as openpmix writes it — seven bits a byte, low first,
// a ninth byte whole — and its sign folding.
func TestFlex(t *testing.T) {
	all := bytes.Repeat([]byte{0xff}, 9)
	for _, c := range []struct {
		v    uint64
		want []byte
	}{
		{0, []byte{0}}, {1, []byte{1}}, {127, []byte{0x7f}}, {128, []byte{0x80, 1}},
		{300, []byte{0xac, 2}}, {1<<56 - 1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{1 << 56, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1}}, {math.MaxUint64, all},
	} {
		if got := appendUvarint(nil, c.v); !bytes.Equal(got, c.want) {
			t.Errorf("%d encodes as % x, want % x", c.v, got, c.want)
		}
		if v, n := uvarint(append(c.want, 0x55)); v != c.v || n != len(c.want) {
			t.Errorf("% x decodes as %d (%d bytes), want %d", c.want, v, n, c.v)
		}
		if _, n := uvarint(c.want[:len(c.want)-1]); n != 0 {
			t.Errorf("% x cut short decodes", c.want)
		}
	}
	for _, c := range []struct {
		v    int64
		want []byte
	}{
		{0, []byte{0}}, {-1, []byte{1}}, {1, []byte{2}}, {-2, []byte{3}}, {63, []byte{0x7e}}, {-64, []byte{0x7f}},
		{math.MinInt64, all}, {math.MaxInt64, append([]byte{0xfe}, all[1:]...)},
	} {
		if got := appendVarint(nil, c.v); !bytes.Equal(got, c.want) {
			t.Errorf("%d encodes as % x, want % x", c.v, got, c.want)
		}
		if v, _ := uvarint(c.want); unfold(v) != c.v {
			t.Errorf("% x decodes as %d, want %d", c.want, unfold(v), c.v)
		}
	}
}

// TestServerData decodes what a real server sent (testdata/README.md).
func TestServerData(t *testing.T) {
	job, err := os.ReadFile("testdata/mpirun-4.1.4-job")
	if err != nil {
		t.Fatal(err)
	}
	cl := &Client{me: Proc{Nspace: "709885953", Rank: 0}}
	if err := cl.jobData(job); err != nil {
		t.Fatal(err)
	}
	if cl.Size() != 2 {
		t.Errorf("size %d, want 2", cl.Size())
	}
	for r := 0; r < 2; r++ {
		if v, ok := cl.Proc(r, KeyNodeID); !ok || v.V != uint64(0) || v.Type != Uint32 {
			t.Errorf("rank %d's node id: %+v %v", r, v, ok)
		}
		if v, ok := cl.Proc(r, KeyHostname); !ok || v.V != "vm" {
			t.Errorf("rank %d's host: %+v %v", r, v, ok)
		}
		if v, ok := cl.Proc(r, "pmix.lrank"); !ok || v.V != uint64(r) || v.Type != Uint16 {
			t.Errorf("rank %d's local rank: %+v %v", r, v, ok)
		}
	}
	if n := cl.Nodes(); len(n) != 1 || len(n[0]) == 0 || n[0][0].Key != KeyHostname || n[0][0].Value.V != "vm" {
		t.Errorf("node arrays: %+v", n)
	}
	if v, ok := cl.Job("pmix.jobid"); !ok || v.V != "[10832,1]" {
		t.Errorf("jobid: %+v", v)
	}
	if err := cl.jobData(job[:len(job)-3]); !errors.Is(err, ErrProtocol) {
		t.Errorf("cut short: %v, want ErrProtocol", err)
	}
	cl.me.Nspace = "other"
	if err := cl.jobData(job); !errors.Is(err, ErrProtocol) {
		t.Errorf("for another namespace: %v, want ErrProtocol", err)
	}
}

// fakeServer accepts one client on loopback, answers the handshake with
// status (and pindex 7 on success), then hands each request to serve,
// which answers with a payload or nil to hang up. It returns the
// connection's far end for the client and the server's error channel.
func fakeServer(t *testing.T, status int32, serve func(cmd byte, req []byte) []byte) (net.Conn, chan error) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			c, err := l.Accept()
			if err != nil {
				return err
			}
			defer c.Close()
			var h [headerLen]byte
			if _, err := io.ReadFull(c, h[:]); err != nil {
				return err
			}
			if _, err := io.ReadFull(c, make([]byte, binary.LittleEndian.Uint32(h[8:]))); err != nil {
				return err
			}
			var a [8]byte
			binary.BigEndian.PutUint32(a[:], uint32(status))
			binary.BigEndian.PutUint32(a[4:], 7)
			if status != 0 {
				_, err := c.Write(a[:4])
				return err
			}
			if _, err := c.Write(a[:]); err != nil {
				return err
			}
			for {
				tag, req, err := readMsg(c)
				if err != nil {
					return nil // the client hung up
				}
				d := decoder{b: req}
				var cmd byte
				d.one("command", func() { cmd = d.u8() })
				ans := serve(cmd, d.b)
				if ans == nil {
					return nil
				}
				if err := writeMsg(c, 7, tag, ans); err != nil {
					return err
				}
			}
		}()
	}()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, errc
}

// jobOf2 is job data of a job of two.
func jobOf2(ns string) []byte {
	var e encoder
	e.count(1)
	e.str(ns)
	e.count(1)
	e.str(KeyJobSize)
	e.dataType(uint16(Uint32))
	e.uvarint(2)
	return e.b
}

func status(st int32) []byte {
	var e encoder
	e.count(1)
	e.varint(int64(st))
	return e.b
}

func TestFakeServer(t *testing.T) {
	me := Proc{Nspace: "job", Rank: 1}
	ctx := context.Background()
	connect := func(t *testing.T, serve func(byte, []byte) []byte) *Client {
		c, _ := fakeServer(t, 0, func(cmd byte, req []byte) []byte {
			if cmd == cmdReq {
				return jobOf2("job")
			}
			return serve(cmd, req)
		})
		cl, err := Connect(ctx, c, me, "native")
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	t.Run("handshake refused", func(t *testing.T) {
		c, _ := fakeServer(t, StatusNotFound, nil)
		_, err := Connect(ctx, c, me, "native")
		var se *StatusError
		if !errors.As(err, &se) || se.Status != StatusNotFound || !strings.Contains(err.Error(), "PMIX_ERR_NOT_FOUND") {
			t.Errorf("%v, want PMIX_ERR_NOT_FOUND", err)
		}
	})
	t.Run("not a PMIx server", func(t *testing.T) {
		// A server that reads the connect message and hangs up, as one
		// that does not know the namespace or the format does.
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Read(make([]byte, 64))
				c.Close()
			}
		}()
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := Connect(ctx, c, me, "native"); err == nil || !strings.Contains(err.Error(), "without answering the handshake") {
			t.Errorf("%v", err)
		}
	})
	t.Run("commit fence get", func(t *testing.T) {
		var committed []byte
		cl := connect(t, func(cmd byte, req []byte) []byte {
			switch cmd {
			case cmdCommit:
				committed = req
				return status(0)
			case cmdFence:
				return status(0)
			case cmdGet:
				var e encoder
				e.count(1)
				e.varint(0)
				var blob encoder
				blob.count(1)
				blob.proc("job", 0)
				blob.b = append(blob.b, committed[5:]...) // the kvals rank 1 committed, as rank 0's
				e.count(1)
				e.bytes(blob.b)
				return e.b
			}
			return status(-1)
		})
		if cl.Size() != 2 || cl.Rank() != 1 {
			t.Fatalf("rank %d of %d", cl.Rank(), cl.Size())
		}
		cl.Put("k", []byte("old"))
		cl.Put("k", []byte("value"))
		if err := cl.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.Fence(ctx); err != nil {
			t.Fatal(err)
		}
		v, err := cl.Get(ctx, 0, "k")
		if err != nil || string(v) != "value" {
			t.Fatalf("%q, %v", v, err)
		}
		if _, err := cl.Get(ctx, 0, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a key never put: %v, want ErrNotFound", err)
		}
		if _, err := cl.Get(ctx, 2, "k"); err == nil {
			t.Error("rank 2 of 2: no error")
		}
	})
	t.Run("not found", func(t *testing.T) {
		cl := connect(t, func(byte, []byte) []byte { return status(StatusNotFound) })
		if _, err := cl.Get(ctx, 0, "k"); !errors.Is(err, ErrNotFound) {
			t.Errorf("%v, want ErrNotFound", err)
		}
	})
	t.Run("server dies in a fence", func(t *testing.T) {
		cl := connect(t, func(byte, []byte) []byte { return nil })
		err := cl.Fence(ctx)
		if err == nil || !strings.Contains(err.Error(), "the server closed the connection") {
			t.Errorf("%v", err)
		}
		if err := cl.Fence(ctx); err == nil || !strings.Contains(err.Error(), "unusable") {
			t.Errorf("after: %v", err)
		}
	})
	t.Run("context ends a fence", func(t *testing.T) {
		block := make(chan struct{})
		defer close(block)
		cl := connect(t, func(byte, []byte) []byte { <-block; return nil })
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := cl.Fence(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v, want the context's error", err)
		}
	})
	t.Run("malformed answer", func(t *testing.T) {
		cl := connect(t, func(byte, []byte) []byte { return []byte{0x02} })
		if err := cl.Fence(ctx); !errors.Is(err, ErrProtocol) {
			t.Errorf("%v, want ErrProtocol", err)
		}
	})
	t.Run("finalize", func(t *testing.T) {
		var got byte
		cl := connect(t, func(cmd byte, _ []byte) []byte { got = cmd; return status(0) })
		if err := cl.Finalize(ctx); err != nil || got != cmdFinalize {
			t.Errorf("%v, command %d", err, got)
		}
	})
}

// TestConnectMessage: the connect message is laid out as openpmix's
// server parses it.
func TestConnectMessage(t *testing.T) {
	m := connectMessage(Proc{Nspace: "ns", Rank: 3}, "native")
	if got := binary.LittleEndian.Uint32(m[8:]); int(got) != len(m)-headerLen {
		t.Fatalf("header says %d bytes, %d follow", got, len(m)-headerLen)
	}
	p := m[headerLen:]
	want := []byte("native\x00\x00\x00\x00\x08")
	if !bytes.HasPrefix(p, want) {
		t.Fatalf("% x", p)
	}
	p = p[len(want)+8:]
	want = []byte("\x00ns\x00\x00\x00\x00\x034.2.2\x00v4\x00\x01hash\x00\x00")
	if !bytes.Equal(p, want) {
		t.Errorf("% x, want % x", p, want)
	}
}

func TestParseURI(t *testing.T) {
	for _, c := range []struct {
		in, network, addr string
		server            Proc
		bad               bool
	}{
		{in: "1043070976.0;tcp4://127.0.0.1:44285", network: "tcp4", addr: "127.0.0.1:44285", server: Proc{"1043070976", 0}},
		{in: "prterun-x-1@0.0;tcp6://[::1]:5000", network: "tcp6", addr: "[::1]:5000", server: Proc{"prterun-x-1@0", 0}},
		{in: "ns.0;usock:/tmp/x", bad: true},
		{in: "ns.x;tcp4://127.0.0.1:1", bad: true},
		{in: "tcp4://127.0.0.1:1", bad: true},
		{in: "ns.0;tcp4://127.0.0.1", bad: true},
	} {
		s, n, a, err := parseURI(c.in)
		if c.bad != (err != nil) || !c.bad && (s != c.server || n != c.network || a != c.addr) {
			t.Errorf("%q: %v %q %q %v", c.in, s, n, a, err)
		}
	}
}

// FuzzJobData: what a server sends never panics the client, and a cut
// message is an error.
func FuzzJobData(f *testing.F) {
	for _, name := range []string{"testdata/mpirun-4.1.4-job", "testdata/mpirun-4.1.4-get"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cl := &Client{me: Proc{Nspace: "709885953"}}
		cl.jobData(b)
		procData(b)
		d := decoder{b: b}
		for t := DataType(0); t < 64 && d.err == nil; t++ {
			d.value(t)
		}
	})
}
