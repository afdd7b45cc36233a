//go:build linux

package pmi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

func TestWireV2(t *testing.T) {
	var b bytes.Buffer
	m := msg{"kvs-put", []kv{{"key", "a"}, {"value", "x;y"}}}
	if err := writeV2(&b, m); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "29    cmd=kvs-put;key=a;value=x;;y;" {
		t.Fatalf("wire %q", got)
	}
	back, err := readV2(bufio.NewReader(&b))
	if err != nil || back.cmd != "kvs-put" || len(back.attrs) != 2 || back.attrs[1].v != "x;y" {
		t.Errorf("read back %+v, %v", back, err)
	}
	// MPICH right-aligns the length.
	if m, err := readV2(bufio.NewReader(strings.NewReader("    18cmd=finalize;rc=0;"))); err != nil || m.cmd != "finalize" {
		t.Errorf("right-aligned length: %+v, %v", m, err)
	}
	for _, bad := range []string{"abcdefcmd=x;", "5     cmd=x", "9     key=v;rc;", "0     "} {
		if _, err := readV2(bufio.NewReader(strings.NewReader(bad))); !errors.Is(err, ErrProtocol) {
			t.Errorf("readV2(%q) = %v, want ErrProtocol", bad, err)
		}
	}
}

func TestWireV1(t *testing.T) {
	var b bytes.Buffer
	if err := writeV1(&b, msg{"put", []kv{{"kvsname", "k"}, {"key", "a"}, {"value", "1"}}}); err != nil {
		t.Fatal(err)
	}
	if b.String() != "cmd=put kvsname=k key=a value=1\n" {
		t.Fatalf("wire %q", b.String())
	}
	if err := writeV1(&b, msg{"put", []kv{{"value", "has space"}}}); !errors.Is(err, ErrProtocol) {
		t.Errorf("space in value: %v", err)
	}
	for _, bad := range []string{"\n", "put key=v\n", "cmd=x novalue\n"} {
		if _, err := readV1(bufio.NewReader(strings.NewReader(bad))); !errors.Is(err, ErrProtocol) {
			t.Errorf("readV1(%q) = %v", bad, err)
		}
	}
}

// socketpair gives the two ends of a PMI_FD-style connection, both
// pollable so deadlines work.
func socketpair(t *testing.T) (*os.File, *os.File) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := os.NewFile(uintptr(fds[0]), "client"), os.NewFile(uintptr(fds[1]), "server")
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// job starts a server and size clients; each client runs fn.
func job(t *testing.T, srv *Server, fn func(c *Client) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, srv.Size)
	var wg sync.WaitGroup
	for r := 0; r < srv.Size; r++ {
		cl, sv := socketpair(t)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ctx, r, sv); err != nil && !errors.Is(err, io.EOF) {
				t.Logf("server, rank %d: %v", r, err)
			}
			sv.Close()
		}()
		go func() {
			defer wg.Done()
			defer cl.Close()
			c, err := NewClient(ctx, cl, r, "", "")
			if err == nil {
				err = fn(c)
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	return errs
}

func exchange(t *testing.T, srv *Server, version int) {
	ctx := context.Background()
	blob := bytes.Repeat([]byte("endpoint;=\x00"), 500) // 5500 bytes: chunked, with bytes PMI cannot carry raw
	errs := job(t, srv, func(c *Client) error {
		if c.Size() != srv.Size || c.Version() != version || c.JobID() != srv.JobID {
			return fmt.Errorf("rank %d: size %d version %d job %q", c.Rank(), c.Size(), c.Version(), c.JobID())
		}
		if err := c.Put(ctx, "addr-"+strconv.Itoa(c.Rank()), "host:"+strconv.Itoa(c.Rank())); err != nil {
			return err
		}
		if err := c.PutBlob(ctx, "blob-"+strconv.Itoa(c.Rank()), append(blob, byte(c.Rank()))); err != nil {
			return err
		}
		if _, err := c.Get(ctx, "addr-0"); !errors.Is(err, ErrNotFound) && version == 2 {
			return fmt.Errorf("a put was visible before the fence: %v", err)
		}
		if err := c.Fence(ctx); err != nil {
			return err
		}
		for p := 0; p < c.Size(); p++ {
			v, err := c.Get(ctx, "addr-"+strconv.Itoa(p))
			if err != nil || v != "host:"+strconv.Itoa(p) {
				return fmt.Errorf("rank %d reading %d: %q, %v", c.Rank(), p, v, err)
			}
			b, err := c.GetBlob(ctx, "blob-"+strconv.Itoa(p))
			if err != nil || !bytes.Equal(b, append(blob, byte(p))) {
				return fmt.Errorf("rank %d: blob of %d wrong (%d bytes, %v)", c.Rank(), p, len(b), err)
			}
		}
		return c.Finalize(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestExchangeV2(t *testing.T) { exchange(t, NewServer(4, "job-v2"), 2) }

func TestExchangeV1(t *testing.T) {
	srv := NewServer(3, "kvs_1")
	srv.V1Only = true
	t.Setenv("PMI_SIZE", "3")
	exchange(t, srv, 1)
}

// TestRankLost: a rank that disconnects without finalizing fails the fence
// of everyone else, naming it, instead of leaving them waiting.
func TestRankLost(t *testing.T) {
	srv := NewServer(4, "job")
	errs := job(t, srv, func(c *Client) error {
		if c.Rank() == 2 {
			return nil // exits: its connection closes (job closes it)
		}
		return c.Fence(context.Background())
	})
	for r, err := range errs {
		if r != 2 && (err == nil || !strings.Contains(err.Error(), "rank 2 exited without finalizing")) {
			t.Errorf("rank %d: %v, want the lost rank named", r, err)
		}
	}
}

func TestFenceHonoursContext(t *testing.T) {
	srv := NewServer(2, "job")
	cl, sv := socketpair(t)
	go srv.Serve(context.Background(), 0, sv)
	c, err := NewClient(context.Background(), cl, 0, "", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := c.Fence(ctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("fence with the peer missing: %v after %v", err, time.Since(start))
	}
	if err := c.Put(context.Background(), "k", "v"); err == nil || !strings.Contains(err.Error(), "unusable") {
		t.Errorf("use after an abandoned request: %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	c := &Client{v2: true}
	for _, kvp := range [][2]string{{"", "v"}, {strings.Repeat("k", 65), "v"}, {"k", strings.Repeat("v", 1025)}, {"k;", "v"}, {"k", "a b"}} {
		if err := c.Put(context.Background(), kvp[0], kvp[1]); err == nil {
			t.Errorf("Put(%q, %d bytes) accepted", kvp[0], len(kvp[1]))
		}
	}
	t.Setenv("PMI_FD", "")
	t.Setenv("PMI_PORT", "")
	if _, err := FromEnv(context.Background()); !errors.Is(err, ErrNoLauncher) {
		t.Errorf("FromEnv without a launcher: %v", err)
	}
	t.Setenv("PMI_FD", "nope")
	if _, err := FromEnv(context.Background()); err == nil {
		t.Error("PMI_FD=nope accepted")
	}
}

const hydraChildEnv = "RIVET_PMI_HYDRA_CHILD"

// TestHydra runs this test binary under MPICH's Hydra (Debian's mpich):
// four processes find their ranks through PMI_FD and exchange addresses.
func TestHydra(t *testing.T) {
	if os.Getenv(hydraChildEnv) == "1" {
		hydraChild(t)
		return
	}
	hydra := testutil.LookTool(t, "mpiexec.hydra", "mpich")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hydra, "-n", "4", os.Args[0], "-test.run=^TestHydra$", "-test.v")
	cmd.Env = append(os.Environ(), hydraChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpiexec.hydra: %v\n%s", err, out)
	}
	for r := 0; r < 4; r++ {
		if !strings.Contains(string(out), fmt.Sprintf("hydra rank %d of 4 ok", r)) {
			t.Errorf("rank %d did not report\n%s", r, out)
		}
	}
}

func hydraChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := FromEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ep := func(r int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("endpoint of %d;", r)), 200) } // several chunks
	if err := c.PutBlob(ctx, "ep-"+strconv.Itoa(c.Rank()), ep(c.Rank())); err != nil {
		t.Fatal(err)
	}
	if err := c.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	for p := 0; p < c.Size(); p++ {
		b, err := c.GetBlob(ctx, "ep-"+strconv.Itoa(p))
		if err != nil || !bytes.Equal(b, ep(p)) {
			t.Fatalf("rank %d reading %d: %q, %v", c.Rank(), p, b, err)
		}
	}
	if err := c.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("hydra rank %d of %d ok (PMI-%d, job %s)\n", c.Rank(), c.Size(), c.Version(), c.JobID())
}

// TestVersionEnv: RIVET_PMI_VERSION=1 makes FromEnv speak PMI-1 to a
// server that speaks PMI-2 too; a value other than 1 or 2 is refused.
func TestVersionEnv(t *testing.T) {
	for _, tc := range []struct {
		env     string
		version int
	}{{"1", 1}, {"2", 2}, {"", 2}, {"3", 0}} {
		srv := NewServer(1, "job")
		cl, sv := socketpair(t)
		fd, err := unix.Dup(int(cl.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.Serve(ctx, 0, sv)
		}()
		t.Setenv("PMI_FD", strconv.Itoa(fd))
		t.Setenv("PMI_PORT", "")
		t.Setenv("PMI_RANK", "0")
		t.Setenv(VersionEnv, tc.env)
		c, err := FromEnv(ctx)
		switch {
		case tc.version == 0 && err == nil:
			t.Errorf("%s=%q accepted", VersionEnv, tc.env)
		case tc.version == 0:
			unix.Close(fd)
		case err != nil:
			t.Errorf("%s=%q: %v", VersionEnv, tc.env, err)
		case c.Version() != tc.version:
			t.Errorf("%s=%q: PMI-%d", VersionEnv, tc.env, c.Version())
		default:
			c.Finalize(ctx)
		}
		cl.Close()
		sv.Close()
		<-done
		cancel()
	}
}
