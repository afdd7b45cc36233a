//go:build linux

// Package perf is perftest for Rivet's verbs: the latency and bandwidth
// microbenchmarks of ib_write_lat, ib_read_lat, ib_atomic_lat,
// ib_send_lat, ib_write_bw and ib_read_bw, with the same roles (a server
// without an address, a client with one), the same parameters and the same
// table layout, so that the two can be run side by side on one device.
package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/verbs"
)

// Test names, as perftest's programs are named without "ib_".
const (
	WriteLat  = "write_lat"
	ReadLat   = "read_lat"
	AtomicLat = "atomic_lat"
	SendLat   = "send_lat"
	WriteBW   = "write_bw"
	ReadBW    = "read_bw"
)

// Tests lists every test.
var Tests = []string{WriteLat, ReadLat, AtomicLat, SendLat, WriteBW, ReadBW}

// Config is one run, as perftest's flags describe it.
type Config struct {
	Test     string
	Device   string // -d; "" means the first active device
	IBPort   int    // -i; 0 means 1
	GIDIndex int    // -x; -1 means the port's IPv4 RoCE v2 GID
	Size     int    // -s; 0 means 2 bytes (latency) or 65536 (bandwidth), as perftest
	Iters    int    // -n; 0 means 1000 (latency) or 5000 (bandwidth)
	AllSizes bool   // -a: every power of two from 2 bytes to 8 MiB
	Port     int    // -p, the TCP port of the exchange; 0 means 18515
	Server   string // the server's address; "" runs the server
	TxDepth  int    // -t, bandwidth tests' outstanding requests; 0 means 128
	Inline   int    // -I, the largest size sent inline; -1 means perftest's default (220 for writes and sends)
	Atomic   string // -A for atomic_lat: FETCH_AND_ADD (default) or CMP_AND_SWAP
	// Histogram (-H) prints every iteration's latency, sorted, before its
	// row; Unsorted (-U) prints them in the order measured and implies
	// Histogram. Latency tests only, on the side that reports.
	Histogram, Unsorted bool
	// QPTimeout (-u) is the queue pair's ACK timeout exponent, as
	// perftest's --qp-timeout: a retransmission after 4.096 µs <<
	// QPTimeout, the peer given up after 7 of them. 0 means 14 (67 ms).
	// Raise it where a peer may stall for longer than half a second
	// (virtual machines on a loaded host) and packets are lost.
	QPTimeout int
}

// Result is one row of the table.
type Result struct {
	Size  int
	Iters int
	// Latency tests (half a round trip for write and send, one operation
	// for read and atomic, as perftest reports them).
	Min, Max, Typical, Avg, Stdev, P99, P999 time.Duration
	// Bandwidth tests, in MiB/s as perftest's MB/sec, and millions of
	// messages per second.
	BWPeak, BWAvg, MsgRate float64
	// Samples holds a latency test's iterations, each as the statistics
	// above count it, in the order measured.
	Samples []time.Duration
}

func (c *Config) defaults() error {
	known := false
	for _, t := range Tests {
		known = known || t == c.Test
	}
	if !known {
		return fmt.Errorf("unknown test %q (want one of %v)", c.Test, Tests)
	}
	bw := c.isBW()
	if c.IBPort == 0 {
		c.IBPort = 1
	}
	if c.Size == 0 {
		c.Size = 2
		if bw {
			c.Size = 65536
		}
	}
	if c.Iters == 0 {
		c.Iters = 1000
		if bw {
			c.Iters = 5000
		}
	}
	if c.Port == 0 {
		c.Port = 18515
	}
	if c.TxDepth == 0 {
		c.TxDepth = 128
	}
	if c.QPTimeout < 0 || c.QPTimeout > 31 {
		return fmt.Errorf("QP timeout %d (want 1 to 31)", c.QPTimeout)
	}
	if c.Inline < 0 {
		c.Inline = 0
		if c.Test == WriteLat || c.Test == SendLat || c.Test == WriteBW {
			c.Inline = 220
		}
	}
	if c.Atomic == "" {
		c.Atomic = "FETCH_AND_ADD"
	}
	switch {
	case c.Atomic != "FETCH_AND_ADD" && c.Atomic != "CMP_AND_SWAP":
		return fmt.Errorf("atomic type %q (FETCH_AND_ADD or CMP_AND_SWAP)", c.Atomic)
	case c.Size < 1 || c.Size > maxSize:
		return fmt.Errorf("size %d (1 to %d)", c.Size, maxSize)
	case c.Test == AtomicLat && c.Size != 8:
		c.Size = 8 // atomics are 8 bytes, whatever -s says, as in perftest
	case c.Iters < 5:
		return fmt.Errorf("%d iterations (at least 5)", c.Iters)
	case c.TxDepth < 1 || c.TxDepth > 4096:
		return fmt.Errorf("tx depth %d", c.TxDepth)
	case (c.Histogram || c.Unsorted) && bw:
		return errors.New("-H and -U report latency tests' iterations; a bandwidth test has none to report")
	}
	if c.Unsorted {
		c.Histogram = true
	}
	return nil
}

func (c *Config) isBW() bool { return c.Test == WriteBW || c.Test == ReadBW }

const maxSize = 8 << 20

// allSizesMax is where -a stops; tests lower it to keep runs short.
var allSizesMax = maxSize

func (c *Config) sizes() []int {
	if !c.AllSizes {
		return []int{c.Size}
	}
	if c.Test == AtomicLat {
		return []int{8}
	}
	var s []int
	for n := 2; n <= allSizesMax; n *= 2 {
		s = append(s, n)
	}
	return s
}

// hello is what the two sides exchange over TCP before the test.
type hello struct {
	Test     string
	Size     int
	Iters    int
	AllSizes bool
	Endpoint verbs.Endpoint
	Buf      verbs.RemoteBuf
}

// Run runs the test as server or client and prints the table to out.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	e, err := newEnv(cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()

	conn, err := exchangeConn(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	mine := hello{Test: cfg.Test, Size: cfg.Size, Iters: cfg.Iters, AllSizes: cfg.AllSizes,
		Endpoint: e.qp.Endpoint(e.gid), Buf: e.mr.Remote()}
	if err := json.NewEncoder(conn).Encode(mine); err != nil {
		return nil, fmt.Errorf("exchange: %w", err)
	}
	dec := json.NewDecoder(conn)
	var peer hello
	if err := dec.Decode(&peer); err != nil {
		return nil, fmt.Errorf("exchange: %w", err)
	}
	if peer.Test != cfg.Test || peer.Size != cfg.Size || peer.Iters != cfg.Iters || peer.AllSizes != cfg.AllSizes {
		return nil, fmt.Errorf("the peer runs %s -s %d -n %d (all sizes %v), this side %s -s %d -n %d (all sizes %v)",
			peer.Test, peer.Size, peer.Iters, peer.AllSizes, cfg.Test, cfg.Size, cfg.Iters, cfg.AllSizes)
	}
	// Outstanding reads and atomics: as many as the device allows for the
	// bandwidth tests, one for the latency tests, which never have more in
	// flight.
	rd := 1
	if cfg.isBW() {
		rd = min(128, e.ctx.Attr().MaxQPRdAtom)
	}
	cc := verbs.ConnectConfig{GIDIndex: cfg.GIDIndex, MaxRdAtomic: rd, MaxDestRdAtomic: rd, Timeout: uint8(cfg.QPTimeout)}
	if err := e.qp.Connect(peer.Endpoint, cc); err != nil {
		return nil, err
	}
	e.remote = peer.Buf
	e.sync = func() error { return barrier(conn, dec) }

	printHeader(out, cfg, e)
	var results []Result
	for _, size := range cfg.sizes() {
		// Clear what the peer writes into before the barrier: after it, the
		// peer's first write may already be on its way.
		_, dst, _ := e.halves(size)
		clear(dst)
		if err := e.sync(); err != nil {
			return results, err
		}
		r, err := e.run(ctx, size)
		if err != nil {
			return results, fmt.Errorf("%s, %d bytes: %w", cfg.Test, size, err)
		}
		if err := e.sync(); err != nil { // the passive side waits here for the active one
			return results, err
		}
		if r != nil {
			printRow(out, cfg, *r)
			results = append(results, *r)
		}
	}
	printFooter(out)
	return results, nil
}

// exchangeConn connects to the server, or waits for the client.
func exchangeConn(ctx context.Context, cfg Config) (net.Conn, error) {
	addr := net.JoinHostPort(cfg.Server, strconv.Itoa(cfg.Port))
	if cfg.Server != "" {
		var d net.Dialer
		// Like perftest, retry while the server is still starting.
		for deadline := time.Now().Add(10 * time.Second); ; {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				return c, err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	c, err := l.Accept()
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return c, err
}

// barrier makes both sides wait for each other, as perftest's ctx_hand_shake.
func barrier(w io.Writer, dec *json.Decoder) error {
	if _, err := w.Write([]byte("0\n")); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	var v int
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	return nil
}

// env is one side's verbs objects.
type env struct {
	cfg    Config
	ctx    *verbs.Context
	pd     *verbs.PD
	scq    *verbs.CQ
	rcq    *verbs.CQ
	qp     *verbs.QP
	mr     *verbs.MR // two halves: what we send from, what the peer writes into
	gid    hw.GID
	mtu    hw.MTU
	remote verbs.RemoteBuf
	sync   func() error
	wcs    []verbs.WorkCompletion
	times  []int64
	opened []io.Closer // in creation order; closed in reverse

	recvsPosted bool // send_lat's receive window is up
}

func newEnv(cfg Config) (e *env, err error) {
	e = &env{cfg: cfg, wcs: make([]verbs.WorkCompletion, 64)}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.ctx, err = verbs.Open(cfg.Device); err != nil {
		return nil, err
	}
	e.opened = append(e.opened, e.ctx)
	if e.pd, err = e.ctx.AllocPD(); err != nil {
		return nil, err
	}
	e.opened = append(e.opened, e.pd)
	// Latency tests keep one request in flight: small rings, as perftest's
	// tx depth of 1, so every operation touches the same few pages of ring
	// (under emulation a fresh page per operation costs microseconds).
	sendDepth, recvDepth := 4, recvWindow
	if cfg.isBW() {
		sendDepth, recvDepth = cfg.TxDepth, 16
	}
	if e.scq, err = e.ctx.NewCQ(verbs.CQConfig{Size: sendDepth, Unlocked: true}); err != nil {
		return nil, err
	}
	e.opened = append(e.opened, e.scq)
	if e.rcq, err = e.ctx.NewCQ(verbs.CQConfig{Size: recvDepth, Unlocked: true}); err != nil {
		return nil, err
	}
	e.opened = append(e.opened, e.rcq)
	size := cfg.Size
	if cfg.AllSizes {
		size = maxSize
	}
	// Two halves of roundup(size, 64) bytes: the same layout on both sides.
	if e.mr, err = e.pd.Alloc(2*((size+63)&^63), verbs.AccessAll); err != nil {
		return nil, err
	}
	e.opened = append(e.opened, e.mr)
	e.qp, err = e.pd.NewQP(verbs.QPConfig{SendCQ: e.scq, RecvCQ: e.rcq, MaxSendWR: sendDepth, MaxRecvWR: recvDepth,
		MaxInline: cfg.Inline, Port: cfg.IBPort, Unlocked: true}) // one goroutine uses them all
	if err != nil {
		return nil, err
	}
	e.opened = append(e.opened, e.qp)
	port, err := e.ctx.QueryPort(cfg.IBPort)
	if err != nil {
		return nil, err
	}
	e.mtu = port.ActiveMTU
	d := e.ctx.Device()
	for _, p := range d.Ports {
		for _, g := range p.GIDs {
			if p.Number == cfg.IBPort && ((cfg.GIDIndex >= 0 && g.Index == cfg.GIDIndex) ||
				(cfg.GIDIndex < 0 && g.Type == hw.GIDTypeRoCEv2 && g.GID.IsIPv4())) {
				e.gid = g.GID
			}
		}
	}
	if e.gid.IsZero() {
		return nil, fmt.Errorf("%s port %d: no GID at index %d", d.Name, cfg.IBPort, cfg.GIDIndex)
	}
	e.times = make([]int64, cfg.Iters+1)
	calibrate()
	return e, nil
}

func (e *env) close() {
	for i := len(e.opened) - 1; i >= 0; i-- {
		e.opened[i].Close()
	}
}

func (e *env) run(ctx context.Context, size int) (*Result, error) {
	client := e.cfg.Server != ""
	switch e.cfg.Test {
	case WriteLat:
		return e.writeLat(ctx, size, client)
	case SendLat:
		return e.sendLat(ctx, size, client)
	case ReadLat, AtomicLat:
		if !client {
			return nil, nil // the server's memory is the target; it has nothing to do
		}
		return e.opLat(ctx, size)
	case WriteBW, ReadBW:
		if !client {
			return nil, nil
		}
		return e.bw(ctx, size)
	}
	return nil, errors.New("unreachable")
}
