//go:build linux

package rdma

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/verbs"
)

// Connections are made on first use. Every process publishes one address
// at bootstrap — its GID, its control words, a TCP port on the RDMA
// netdev's IP address and a random token — and creates no queue pair. The
// first frame (or one-sided operation) for a peer creates our queue pair
// and its receive buffers and starts a handshake over TCP: we send our QPN
// and PSN (with the peer's token, which only the job knows), the peer
// creates its side, connects it and answers with its QPN and PSN, and we
// connect ours and say so. A queue pair must be connected before the
// first packet reaches it (rxe drops packets for one that is not, and the
// sender spends retries), so each side sends only once it knows the other
// is connected: the initiator when the answer comes, the other side when
// the initiator confirms — or when its first frame arrives. Two processes
// that start at once meet in the middle: each side keeps one queue pair
// per peer, and whichever message brings the peer's QPN first connects it.
// Frames for a peer wait in the engine's queue meanwhile (Send refuses
// them).
//
// Until then a peer costs nothing: its address, unless SetAddr gave it
// at start, is read from the bootstrap (Config.Resolve) when either side
// first connects, so a process reads the addresses of the peers it talks
// to, not of all (at the launcher, lookups that grow with the job, not
// with its square); no queue pair, no credits from the receive pool.

// peerAddr is what the bootstrap says about a peer.
type peerAddr struct {
	gid   hw.GID
	ctl   verbs.RemoteBuf
	token [16]byte
	tcp   string
}

// listen opens the handshake port on the GID's address.
func (v *Provider) listen() error {
	ip := net.IP(v.gid[:])
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
	if err != nil {
		return fmt.Errorf("verbs provider: listening on %s for connections: %w", ip, err)
	}
	if _, err := rand.Read(v.token[:]); err != nil {
		ln.Close()
		return err
	}
	v.ln = ln
	v.conns = map[net.Conn]bool{}
	v.hsCtx, v.hsStop = context.WithCancel(context.Background())
	return nil
}

// ServeHandshakes starts answering handshakes, once the fabric has routed
// its peers (a peer that dials earlier waits in the listen backlog).
func (v *Provider) ServeHandshakes() { v.handshakeGo(func() { v.accept(v.ln) }) }

// handshakeGo runs f in a goroutine that close waits for (a socket it
// holds must not outlive the provider); with the engine's lock held, or
// from another such goroutine.
func (v *Provider) handshakeGo(f func()) {
	v.hs.Add(1)
	go func() {
		defer v.hs.Done()
		f()
	}()
}

// Knock asks world rank w's node whether it is there: a TCP connection to
// w's handshake port every period, until one is answered — accepted or
// refused: the node's kernel runs — or ctx ends or the provider closes.
// The connection says nothing and is closed at once (the other side's
// serve reads no hello and lets it go). answered reports whether an
// answer came; ok is false when w's address is not known (never read:
// there is nothing to knock at). With the engine's lock held.
func (v *Provider) Knock(ctx context.Context, w int, period time.Duration) (answered func() bool, ok bool) {
	if w < 0 || w >= len(v.addrs) || !v.hasAddr(w) || v.closing {
		return nil, false
	}
	addr := v.addrs[w].tcp
	var yes atomic.Bool
	v.handshakeGo(func() {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(v.hsCtx, cancel)()
		dial := func(ctx context.Context, deadline time.Time) (net.Conn, error) {
			d := net.Dialer{Deadline: deadline}
			return d.DialContext(ctx, "tcp", addr)
		}
		yes.Store(knock(ctx, dial, period))
	})
	return yes.Load, true
}

// knock dials every period, each dial given until the next, and reports
// true at the first answer — a connection made (closed at once) or
// refused — or false when ctx ends first. A dial that fails otherwise
// (no answer in its time, or no route to ask by, as to a host whose
// neighbour entry failed) is not an answer.
func knock(ctx context.Context, dial func(ctx context.Context, deadline time.Time) (net.Conn, error), period time.Duration) bool {
	for ctx.Err() == nil {
		next := time.Now().Add(period)
		c, err := dial(ctx, next)
		if err == nil {
			c.Close()
			return true
		}
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(next)):
		}
	}
	return false
}

// WaitHandshakes waits, after Close and without the engine's lock, until
// every handshake goroutine has closed its socket and returned: Close
// ended their connections and dials, so that is soon.
func (v *Provider) WaitHandshakes() { v.hs.Wait() }

// hold records c as open until release is called, so that close ends
// every handshake in progress; ok is false if the provider is closing.
func (v *Provider) hold(c net.Conn) (release func(), ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closing {
		return nil, false
	}
	v.conns[c] = true
	return func() {
		v.mu.Lock()
		delete(v.conns, c)
		v.mu.Unlock()
	}, true
}

// Address is what peers need to connect to this process.
func (v *Provider) Address() []byte {
	le := binary.LittleEndian
	b := append([]byte(nil), v.gid[:]...)
	b = le.AppendUint64(b, v.ctl.Addr())
	b = le.AppendUint32(b, v.ctl.RKey())
	b = append(b, v.token[:]...)
	return append(b, v.ln.Addr().String()...)
}

// SetAddr records world rank w's published address (its Address).
func (v *Provider) SetAddr(w int, b []byte) error {
	const fixed = 16 + 8 + 4 + 16
	if len(b) <= fixed {
		return fmt.Errorf("verbs provider: rank %d published a %d-byte address", w, len(b))
	}
	le := binary.LittleEndian
	a := &v.addrs[w]
	copy(a.gid[:], b)
	a.ctl = verbs.RemoteBuf{Addr: le.Uint64(b[16:]), RKey: le.Uint32(b[24:]), Len: uint64(ctlLen(len(v.peers)))}
	copy(a.token[:], b[28:])
	a.tcp = string(b[fixed:])
	return nil
}

// hasAddr reports whether world rank w's address is known (SetAddr).
func (v *Provider) hasAddr(w int) bool { return v.addrs[w].tcp != "" }

// learn reads world rank w's address (Config.Resolve) and then connects
// to it; in a goroutine of handshakeGo's.
func (v *Provider) learn(w int) {
	err := v.learnAddr(w)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.learning[w] = false
	if v.closing {
		return
	}
	if err != nil {
		v.deadNoPeer(w, err)
		return
	}
	v.Connect(w)
}

// learnAddr reads world rank w's address unless it is known; without the
// engine's lock. The read is not cut short by Close (which waits for it):
// a bootstrap call abandoned midway would leave the bootstrap unusable
// for the endpoint's own Close.
func (v *Provider) learnAddr(w int) error {
	v.mu.Lock()
	known := v.hasAddr(w)
	v.mu.Unlock()
	if known {
		return nil
	}
	if v.resolve == nil {
		return fmt.Errorf("no address published for world rank %d", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), vHandshakeTimeout)
	b, err := v.resolve(ctx, w)
	cancel()
	if err != nil {
		return fmt.Errorf("reading the address of world rank %d: %w", w, err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.hasAddr(w) {
		return nil
	}
	return v.SetAddr(w, b)
}

// AddPeer makes world rank w, a process that joined after New (a spawn's),
// a peer reached through this provider, at address b (its Address); with
// the engine's lock held.
func (v *Provider) AddPeer(w int, b []byte) error {
	if w < 0 || w >= len(v.peers) || w == v.me || v.isPeer[w] {
		return fmt.Errorf("verbs provider: world rank %d cannot join (a universe of %d)", w, len(v.peers))
	}
	if err := v.SetAddr(w, b); err != nil {
		return err
	}
	v.isPeer[w] = true
	return nil
}

// Connect starts connecting to world rank w unless that is done or under
// way; with the engine's lock held.
func (v *Provider) Connect(w int) {
	p := v.peers[w]
	if v.closing || p != nil && (p.ready || p.dialing || p.dead) {
		return
	}
	if !v.hasAddr(w) {
		// Its address is read from the bootstrap now, not at Init: a
		// process reads the addresses of the peers it talks to.
		if !v.learning[w] {
			v.learning[w] = true
			v.handshakeGo(func() { v.learn(w) })
		}
		return
	}
	if p == nil {
		var err error
		if p, err = v.newPeer(w); err != nil {
			v.deadNoPeer(w, err)
			return
		}
	}
	p.dialing = true
	hello := wire.Hello{Rank: uint32(v.me), Token: v.addrs[w].token, QPN: p.qp.QPN(), PSN: p.qp.PSN(), Credits: p.granted}
	v.handshakeGo(func() { v.dial(w, hello) })
}

// deadNoPeer records that no queue pair could be made for world rank w;
// the next poll fails it (not here: a send may be on its way to the
// engine's queue).
func (v *Provider) deadNoPeer(w int, err error) {
	v.dead = append(v.dead, peerFault{w, fmt.Errorf("%w: %v", ErrNoRoute, err)})
}

const vHandshakeTimeout = 30 * time.Second

// dial runs our side of a handshake with world rank w, saying hello.
func (v *Provider) dial(w int, hello wire.Hello) {
	err := v.handshake(w, hello)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closing {
		return
	}
	if p := v.peers[w]; p != nil {
		p.dialing = false
		if err != nil && !p.ready {
			p.dead = true
			v.dead = append(v.dead, peerFault{w, handshakeFault(w, err)})
		}
	}
}

// handshakeFault classifies a failed handshake with world rank w. The peer
// listened when the job started, so a refused connection, or one its
// kernel reset or closed halfway (its process died while answering), means
// the process is gone — or, as far as this process can tell, it is: a peer
// that is closing, or already holds this process failed, also hangs up.
// Anything else (a timeout, a bad answer) leaves the peer unreachable, not
// known dead.
func handshakeFault(w int, err error) error {
	for _, gone := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, io.EOF, io.ErrUnexpectedEOF} {
		if errors.Is(err, gone) {
			return fmt.Errorf("%w: its connection port refused or dropped the handshake (%v)", ErrGone, err)
		}
	}
	return fmt.Errorf("%w: connecting to world rank %d: %v", ErrNoRoute, w, err)
}

func (v *Provider) handshake(w int, req wire.Hello) error {
	ctx, cancel := context.WithTimeout(v.hsCtx, vHandshakeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", v.addrs[w].tcp)
	if err != nil {
		return err
	}
	defer c.Close()
	release, ok := v.hold(c)
	if !ok {
		return errClosing
	}
	defer release()
	c.SetDeadline(time.Now().Add(vHandshakeTimeout))
	if _, err := c.Write(req.Marshal()); err != nil {
		return err
	}
	resp, err := wire.ReadHello(c)
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.Rank != uint32(w) || subtle.ConstantTimeCompare(resp.Token[:], v.token[:]) != 1 {
		return errors.New("the answer is not from the process the bootstrap named")
	}
	v.mu.Lock()
	if err := v.connectQP(w, resp.QPN, resp.PSN); err != nil {
		v.mu.Unlock()
		return err
	}
	v.peers[w].ready = true // it answered, so its side is connected
	v.peers[w].credit(resp.Credits)
	v.mu.Unlock()
	_, err = c.Write([]byte{1})
	return err
}

// connectQP connects our queue pair for w to the peer's (qpn, psn), once;
// with the engine's lock held.
func (v *Provider) connectQP(w int, qpn, psn uint32) error {
	if v.closing {
		return errClosing
	}
	p := v.peers[w]
	if p.connected {
		return nil
	}
	if p.dead {
		// Lost already, its credits back in the pool or on their way:
		// nothing of its may land.
		return fmt.Errorf("rank %d is lost", w)
	}
	remote := verbs.Endpoint{GID: v.addrs[w].gid, QPN: qpn, PSN: psn}
	if err := p.qp.Connect(remote, v.connectConfig()); err != nil {
		return fmt.Errorf("connecting to rank %d over %s: %w", w, v.dev.Name(), err)
	}
	p.connected = true
	return nil
}

func (v *Provider) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed
		}
		v.handshakeGo(func() { v.serve(c) })
	}
}

// serve answers one handshake.
func (v *Provider) serve(c net.Conn) {
	defer c.Close()
	release, ok := v.hold(c)
	if !ok {
		return
	}
	defer release()
	c.SetDeadline(time.Now().Add(vHandshakeTimeout))
	req, err := wire.ReadHello(c)
	if err != nil {
		return
	}
	w := int(req.Rank)
	if w < 0 || w >= len(v.peers) || subtle.ConstantTimeCompare(req.Token[:], v.token[:]) != 1 {
		return // not one of ours: say nothing
	}
	v.mu.Lock()
	peer := v.isPeer[w]
	v.mu.Unlock()
	if peer {
		if err := v.learnAddr(w); err != nil {
			return // the dialer fails the handshake; it may be gone
		}
	}
	// A process that knows this one's address but is not a peer here yet
	// joined with a spawn this process is still taking in (AddPeer comes
	// once every record is read): wait for it rather than refuse — a
	// refusal fails the dialer's peer.
	deadline := time.Now().Add(vHandshakeTimeout)
	v.mu.Lock()
	for !v.closing && !v.isPeer[w] && time.Now().Before(deadline) { // (isPeer under the lock: AddPeer)
		v.mu.Unlock()
		time.Sleep(time.Millisecond)
		v.mu.Lock()
	}
	if v.closing || !v.isPeer[w] || !v.hasAddr(w) || v.eng.Failed(w) {
		v.mu.Unlock()
		return
	}
	p := v.peers[w]
	if p == nil {
		if p, err = v.newPeer(w); err != nil {
			v.deadNoPeer(w, err)
			v.mu.Unlock()
			return
		}
	}
	if err := v.connectQP(w, req.QPN, req.PSN); err != nil {
		v.dead = append(v.dead, peerFault{w, fmt.Errorf("%w: %v", ErrNoRoute, err)})
		v.mu.Unlock()
		return
	}
	p.credit(req.Credits)
	resp := wire.Hello{Rank: uint32(v.me), Token: v.addrs[w].token, QPN: p.qp.QPN(), PSN: p.qp.PSN(), Credits: p.granted}
	v.mu.Unlock()
	if _, err := c.Write(resp.Marshal()); err != nil {
		return
	}
	var done [1]byte
	if _, err := io.ReadFull(c, done[:]); err != nil {
		return // its first frame will say it is ready, if it is
	}
	v.mu.Lock()
	if !v.closing && v.peers[w] == p {
		p.ready = true
	}
	v.mu.Unlock()
}
