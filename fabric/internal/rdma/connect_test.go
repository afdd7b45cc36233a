//go:build linux

package rdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHandshakeFault: a peer whose connection port refuses or drops the
// handshake is gone (ErrGone); one that does not answer in time, or
// answers wrongly, is only unreachable (ErrNoRoute).
func TestHandshakeFault(t *testing.T) {
	opErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)}
	}
	for _, c := range []struct {
		err  error
		want error
	}{
		{opErr(syscall.ECONNREFUSED), ErrGone},
		{fmt.Errorf("reading the answer: %w", opErr(syscall.ECONNRESET)), ErrGone},
		{fmt.Errorf("reading the answer: %w", io.ErrUnexpectedEOF), ErrGone},
		{fmt.Errorf("reading the answer: %w", io.EOF), ErrGone},
		{opErr(syscall.EPIPE), ErrGone},
		{os.ErrDeadlineExceeded, ErrNoRoute},
		{errors.New("the answer is not from the process the bootstrap named"), ErrNoRoute},
	} {
		got := handshakeFault(2, c.err)
		other := map[error]error{ErrGone: ErrNoRoute, ErrNoRoute: ErrGone}[c.want]
		if !errors.Is(got, c.want) || errors.Is(got, other) || !strings.Contains(got.Error(), c.err.Error()) {
			t.Errorf("handshakeFault(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestKnock: a node answers a knock by accepting the connection or by
// refusing it; one that answers neither is knocked at every period until
// the context ends, and has not answered.
func TestKnock(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := ln.Addr().String()
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln2.Addr().String()
	ln2.Close() // nothing listens there now: refused
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer ln.Close()
	dialTo := func(addr string) func(context.Context, time.Time) (net.Conn, error) {
		return func(ctx context.Context, deadline time.Time) (net.Conn, error) {
			d := net.Dialer{Deadline: deadline}
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	for _, addr := range []string{open, closed} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if !knock(ctx, dialTo(addr), 10*time.Millisecond) {
			t.Errorf("%s did not answer", addr)
		}
		cancel()
	}
	// Silence: each dial waits out its deadline, as one to a dead node's
	// address does, and the next follows; the context ends at the third.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dials := 0
	silent := func(ctx context.Context, deadline time.Time) (net.Conn, error) {
		if dials++; dials == 3 {
			cancel()
		}
		if left := time.Until(deadline); left > 10*time.Millisecond {
			t.Errorf("a dial given %v, more than the period", left)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(deadline)):
			return nil, os.ErrDeadlineExceeded
		}
	}
	if knock(ctx, silent, 10*time.Millisecond) {
		t.Fatal("a silent node answered")
	}
	if dials != 3 {
		t.Fatalf("%d dials before the context ended at the third", dials)
	}
}
