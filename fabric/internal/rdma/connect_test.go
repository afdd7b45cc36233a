//go:build linux

package rdma

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
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
