//go:build linux

package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzStoreServer: whatever a client answers the store's greeting with,
// the store refuses it — a client cannot prove the secret without it —
// without panicking or hanging, and admits no rank.
func FuzzStoreServer(f *testing.F) {
	for _, s := range []string{"0 abcd 00\n", "1 x y", "-1 a b\n", "99999999999999999999 a b\n", "0 a\n", "\n", "0 a b c\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		s := &storeServer{secret: "s3cret", size: 4, joined: map[int]bool{}}
		srv, cli := net.Pipe()
		go func() {
			r := bufio.NewReader(cli)
			r.ReadString('\n') // the greeting
			// net.Pipe does not buffer: read the verdict while writing.
			go io.Copy(io.Discard, r)
			cli.Write([]byte(answer + "\n"))
		}()
		_, err := s.handshake(srv)
		srv.Close()
		if err == nil {
			t.Fatalf("answer %q was admitted", answer)
		}
		if len(s.joined) != 0 {
			t.Fatalf("answer %q joined %v", answer, s.joined)
		}
	})
}

// FuzzStoreClient: whatever a listener says, a client does not take it
// for the job's store — it cannot prove the secret — and returns.
func FuzzStoreClient(f *testing.F) {
	f.Add(storeHello+" abcd", "ok "+mac("s3cret", "server", "x", 0)+"\n")
	f.Add(storeHello, "ok\n")
	f.Add("hello", "denied bad-secret\n")
	f.Fuzz(func(t *testing.T, greeting, verdict string) {
		srv, cli := net.Pipe()
		go func() {
			srv.Write([]byte(greeting + "\n"))
			bufio.NewReader(srv).ReadString('\n') // the client's proof
			srv.Write([]byte(verdict))
			srv.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := clientHandshake(ctx, cli, 0, "s3cret")
		cli.Close()
		if err == nil {
			t.Fatalf("greeting %q, verdict %q: taken for the store", greeting, verdict)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("greeting %q, verdict %q: hung", greeting, verdict)
		}
	})
}
