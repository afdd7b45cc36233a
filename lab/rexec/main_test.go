package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func server(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go serve(l)
	return l.Addr().String()
}

func TestRun(t *testing.T) {
	addr := server(t)
	for _, c := range []struct {
		cmd, out, err string
		status        int
	}{
		{"echo out; echo err >&2; exit 3", "out\n", "err\n", 3},
		{"printf '%s' \"a  b\"", "a  b", "", 0},
		{"kill -9 $$", "", "", 137},
		{"exec /nonexistent/x", "", "", 127},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		status, err := run(conn, c.cmd, &stdout, &stderr)
		if err != nil {
			t.Fatalf("%q: %v", c.cmd, err)
		}
		if status != c.status || stdout.String() != c.out || (c.err != "" && stderr.String() != c.err) {
			t.Errorf("%q: status %d, stdout %q, stderr %q; want %d, %q, %q", c.cmd, status, stdout.String(), stderr.String(), c.status, c.out, c.err)
		}
	}
}

// TestClientGone: a client that goes takes its command's process group
// with it, as mpirun ending its agents must end the daemons they started.
func TestClientGone(t *testing.T) {
	addr := server(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		_, err := run(conn, "sleep 300 & echo $!; wait", pw, io.Discard)
		ended <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("read %q: %v", line, err)
	}
	go io.Copy(io.Discard, pr)
	conn.Close()
	if err := <-ended; err == nil {
		t.Error("run of a closed connection: no error")
	}
	// The server kills the group once it reads the connection's end:
	// wait for that, bounded only by the test's own time limit.
	for alive(pid) {
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}
