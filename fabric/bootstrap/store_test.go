//go:build linux

package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestStoreSecret: a process without the secret, or claiming a rank that
// already joined, is refused; and a client does not trust a store that
// cannot prove the secret either.
func TestStoreSecret(t *testing.T) {
	ctx, addr, _ := testStore(t, 2, "right")
	try := func(rank int, secret string) error {
		conn, err := dialStore(ctx, addr)
		if err != nil {
			return err
		}
		err = clientHandshake(ctx, conn, rank, secret)
		if err != nil {
			conn.Close()
		}
		return err
	}
	if err := try(1, "wrong"); !errors.Is(err, ErrDenied) {
		t.Errorf("wrong secret: %v, want ErrDenied", err)
	}
	if err := try(5, "right"); !errors.Is(err, ErrDenied) {
		t.Errorf("rank outside the job: %v, want ErrDenied", err)
	}
	if err := try(1, "right"); err != nil {
		t.Errorf("right secret: %v", err)
	}
	if err := try(1, "right"); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "rank-already-joined") {
		t.Errorf("second rank 1: %v, want it refused", err)
	}

	// A rogue listener that greets but cannot prove the secret.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "%s abcd\n", storeHello)
		buf := make([]byte, 256)
		c.Read(buf)
		fmt.Fprintf(c, "ok %s\n", strings.Repeat("0", 64))
	}()
	conn, err := dialStore(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := clientHandshake(ctx, conn, 0, "right"); !errors.Is(err, ErrDenied) {
		t.Errorf("rogue store: %v, want ErrDenied", err)
	}
}

// testStore starts a store for size ranks on a free loopback port, closed
// when the test ends, and returns a context for the test (20 s), its
// address and the store.
func testStore(t *testing.T, size int, secret string) (context.Context, string, *storeServer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	addr := "127.0.0.1:" + freePort(t)
	srv, err := startStore(addr, size, secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.close)
	return ctx, addr, srv
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// TestStoreForget: a rank that joined and never hangs up (its node died)
// holds rank 0's wait at Close until rank 0 forgets it.
func TestStoreForget(t *testing.T) {
	ctx, addr, srv := testStore(t, 2, "s")
	conn, err := dialStore(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := clientHandshake(ctx, conn, 1, "s"); err != nil {
		t.Fatal(err)
	}
	b := &storeBootstrap{srv: srv}
	t0 := time.Now()
	srv.wait(200 * time.Millisecond)
	if time.Since(t0) < 200*time.Millisecond {
		t.Fatal("the wait ended while rank 1 was still connected")
	}
	b.Forget(0) // not joined: nothing to do
	b.Forget(1)
	t0 = time.Now()
	srv.wait(10 * time.Second)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the wait after Forget took %v", d)
	}
}

// TestStoreHungUp: a store that hangs up before its verdict — its
// handshake deadline passed while the client, on a loaded or emulated
// machine, had not answered — admitted nobody, and the client tries
// again rather than take it for a wrong secret. A proxy in front of the
// store swallows the first client's proof and hangs up.
func TestStoreHungUp(t *testing.T) {
	ctx, addr, _ := testStore(t, 2, "s")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for first := true; ; first = false {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				return
			}
			if first {
				greeting, _ := bufio.NewReader(s).ReadString('\n')
				c.Write([]byte(greeting))
				bufio.NewReader(c).ReadString('\n') // the proof, never delivered
				c.Close()
				s.Close()
				continue
			}
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	b, err := joinStore(ctx, "", l.Addr().String(), 1, 2, "s")
	if err != nil {
		t.Fatalf("joining through a store that hung up once: %v", err)
	}
	if b.Rank() != 1 || b.Size() != 2 {
		t.Errorf("joined as rank %d of %d, want 1 of 2", b.Rank(), b.Size())
	}
	b.Close()

	// A client whose context ends while it waits for the verdict says so.
	srv2, cli := net.Pipe()
	go func() {
		fmt.Fprintf(srv2, "%s abcd\n", storeHello)
		bufio.NewReader(srv2).ReadString('\n')
		// no verdict
	}()
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if err := clientHandshake(short, cli, 0, "s"); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrDenied) {
		t.Errorf("verdict never sent: %v, want the context's error", err)
	}
	cli.Close()
	srv2.Close()
}
