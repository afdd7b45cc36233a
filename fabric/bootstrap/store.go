//go:build linux

package bootstrap

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rivet-hpc/rivet/internal/pmi"
)

// The store is how a job started without a PMI launcher (torchrun-style
// variables) meets: rank 0 serves PMI-2 over TCP at MASTER_ADDR:MASTER_PORT,
// and every rank, rank 0 included, joins it as a PMI-2 client. Before any
// PMI message both sides prove they hold the job's secret, HMAC-SHA256
// challenge and response in both directions, so the secret never crosses
// the wire and neither a stranger nor a rogue listener gets in.

const storeHello = "rivet-store/1"

// joinStore joins the job's store at addr; rank 0 first starts it,
// listening at listen.
func joinStore(ctx context.Context, listen, addr string, rank, size int, secret string) (*storeBootstrap, error) {
	var srv *storeServer
	if rank == 0 {
		var err error
		if srv, err = startStore(listen, size, secret); err != nil {
			return nil, err
		}
	}
	conn, err := dialStore(ctx, addr)
	if err == nil {
		err = clientHandshake(ctx, conn, rank, secret)
	}
	// A store that hung up without a verdict (its handshake deadline
	// passed while this process, on a loaded or emulated machine, had not
	// answered yet) admitted nobody: try again while ctx allows.
	for delay := 100 * time.Millisecond; errors.Is(err, errHandshakeCut) && ctx.Err() == nil; delay = min(2*delay, 2*time.Second) {
		conn.Close()
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		if conn, err = dialStore(ctx, addr); err == nil {
			err = clientHandshake(ctx, conn, rank, secret)
		}
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		if srv != nil {
			srv.close()
		}
		return nil, err
	}
	c, err := pmi.NewClient(ctx, conn, rank, "", "")
	if err != nil {
		conn.Close()
		if srv != nil {
			srv.close()
		}
		return nil, fmt.Errorf("bootstrap: joining the store: %w", err)
	}
	return &storeBootstrap{pmiBootstrap: pmiBootstrap{c: c}, srv: srv, launcher: "torchrun"}, nil
}

type storeBootstrap struct {
	pmiBootstrap
	srv      *storeServer // rank 0 only
	launcher string
}

func (b *storeBootstrap) Launcher() string { return b.launcher }

// Forget hangs up on a failed rank, on rank 0; elsewhere it does nothing.
func (b *storeBootstrap) Forget(rank int) {
	if b.srv != nil {
		b.srv.forget(rank)
	}
}

// Close finalizes; on rank 0 it then waits (a while) for the other ranks
// to finish with the store before closing it.
func (b *storeBootstrap) Close() error {
	err := b.pmiBootstrap.Close()
	if b.srv != nil {
		b.srv.wait(30 * time.Second)
		b.srv.close()
	}
	return err
}

func dialStore(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	// Rank 0 may not be listening yet: retry, as torchrun's store does.
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bootstrap: reaching the store at %s: %w (last: %v)", addr, ctx.Err(), err)
		case <-time.After(delay):
		}
	}
}

func mac(secret, role, nonce string, rank int) string {
	h := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(h, "%s|%s|%s|%d", storeHello, role, nonce, rank)
	return hex.EncodeToString(h.Sum(nil))
}

func nonce() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// clientHandshake: read the server's nonce, answer with ours and our proof,
// check the server's proof.
func clientHandshake(ctx context.Context, conn net.Conn, rank int, secret string) error {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 || f[0] != storeHello {
		return fmt.Errorf("bootstrap: the store did not greet (%q, %v)", line, err)
	}
	mine := nonce()
	if _, err := fmt.Fprintf(conn, "%d %s %s\n", rank, mine, mac(secret, "client", f[1], rank)); err != nil {
		return err
	}
	line, err = r.ReadString('\n')
	f = strings.Fields(line)
	if err != nil && line == "" {
		if ctx.Err() != nil {
			return fmt.Errorf("bootstrap: joining the store: %w", ctx.Err())
		}
		return fmt.Errorf("%w (%v)", errHandshakeCut, err)
	}
	if err != nil || len(f) != 2 || f[0] != "ok" {
		return fmt.Errorf("%w: the store refused rank %d (%q)", ErrDenied, rank, strings.TrimSpace(line))
	}
	if !hmac.Equal([]byte(f[1]), []byte(mac(secret, "server", mine, rank))) {
		return fmt.Errorf("%w: the store could not prove it", ErrDenied)
	}
	if r.Buffered() > 0 {
		return fmt.Errorf("bootstrap: the store sent more than its handshake")
	}
	return nil
}

type storeServer struct {
	l       net.Listener
	pmi     *pmi.Server
	secret  string
	size    int
	mu      sync.Mutex
	joined  map[int]bool
	conns   map[net.Conn]bool // open, so that close can end them
	ranks   map[int]net.Conn  // the open connection of each rank that joined
	closed  bool
	serving sync.WaitGroup
}

func startStore(addr string, size int, secret string) (*storeServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: rank 0 cannot host the store at %s: %w", addr, err)
	}
	srv := pmi.NewServer(size, "rivet-store-"+nonce()[:8])
	srv.Mapping = "" // where the ranks run is theirs to say (see slurmBootstrap)
	s := &storeServer{l: l, pmi: srv, secret: secret, size: size, joined: map[int]bool{}, conns: map[net.Conn]bool{}, ranks: map[int]net.Conn{}}
	go s.accept()
	return s, nil
}

func (s *storeServer) accept() {
	for {
		conn, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.conns[conn] = true
		s.serving.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.serving.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, conn)
				for r, c := range s.ranks {
					if c == conn {
						delete(s.ranks, r)
					}
				}
				s.mu.Unlock()
				conn.Close()
			}()
			rank, err := s.handshake(conn)
			if err != nil {
				return
			}
			s.pmi.Serve(context.Background(), rank, conn)
		}()
	}
}

// errHandshakeCut is a store that hung up before its verdict.
var errHandshakeCut = errors.New("bootstrap: the store hung up before it answered")

// handshakeTimeout bounds a handshake at the store: a client that does
// not answer by then is hung up on (and tries again, if it is only slow).
var handshakeTimeout = 30 * time.Second

// handshake admits a rank that proves the secret and has not joined yet.
func (s *storeServer) handshake(conn net.Conn) (int, error) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	mine := nonce()
	fmt.Fprintf(conn, "%s %s\n", storeHello, mine)
	line, err := bufio.NewReader(conn).ReadString('\n') // the client sends nothing more until we answer
	f := strings.Fields(line)
	if err != nil || len(f) != 3 {
		return 0, fmt.Errorf("bad hello %q", line)
	}
	rank, err := strconv.Atoi(f[0])
	deny := func(why string) (int, error) {
		fmt.Fprintf(conn, "denied %s\n", why)
		return 0, ErrDenied
	}
	if err != nil || rank < 0 || rank >= s.size {
		return deny("no-such-rank")
	}
	if !hmac.Equal([]byte(f[2]), []byte(mac(s.secret, "client", mine, rank))) {
		return deny("bad-secret")
	}
	s.mu.Lock()
	dup := s.joined[rank]
	s.joined[rank] = true
	if !dup {
		s.ranks[rank] = conn // before the client hears it joined: Forget finds it
	}
	s.mu.Unlock()
	if dup {
		return deny("rank-already-joined")
	}
	_, err = fmt.Fprintf(conn, "ok %s\n", mac(s.secret, "server", f[1], rank))
	return rank, err
}

// forget hangs up on rank: it failed, and its connection may never end
// by itself (a dead node sends no FIN).
func (s *storeServer) forget(rank int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.ranks[rank]; c != nil {
		c.Close()
	}
}

func (s *storeServer) wait(limit time.Duration) {
	done := make(chan struct{})
	go func() { s.serving.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
	}
}

// close stops the store: the listener, and every connection still open
// — a rank whose node died never closes its own.
func (s *storeServer) close() {
	s.l.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.serving.Wait()
}
