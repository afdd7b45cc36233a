//go:build linux

package fabric

import (
	"context"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/internal/falloc"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() {
	progs.Add("hello", func(context.Context, *Endpoint) error { return nil })
	progs.Add("everyone", progEveryone)
}

// progEveryone sends a message to every other rank, then receives one
// from each: every process claims a ring in every other's segment.
func progEveryone(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	n, me := w.Size(), w.Rank()
	msg := make([]byte, 1024)
	for k := 1; k < n; k++ {
		if err := w.Send(ctx, msg, (me+k)%n, 0); err != nil {
			return err
		}
	}
	for k := 1; k < n; k++ {
		if _, err := w.Recv(ctx, msg, (me-k+n)%n, 0); err != nil {
			return err
		}
	}
	return nil
}

// TestSmallShm, in Docker's default /dev/shm of 64 MiB (16 ranks there
// died of SIGBUS, with thousands of lines of goroutine dumps, while Open
// MPI's ran): 32 ranks that all talk to each other run, since a process
// maps in rings only for the peers that send to it. A /dev/shm too full
// for the job to start is a clear error at Init, at every rank, naming
// the size needed and the size there; one too full for the rings the job
// comes to need fails the sends that need them with ENOSPC, not a SIGBUS;
// and a segment the file system cannot give pages for is an error where
// it is made (ErrNoSpace), not a SIGBUS at its first use.
func TestSmallShm(t *testing.T) {
	if testutil.ShmNamespace(t, 64<<20) {
		return
	}
	smallShm(t)
}

func smallShm(t *testing.T) {
	runOK(t, 32, "everyone", "RIVET_PROVIDER=shm")

	crashed := func(errs string) bool {
		return strings.Contains(errs, "SIGBUS") || strings.Contains(errs, "unexpected fault address")
	}
	// leave fills /dev/shm until free bytes are left, and returns the
	// filler's remover.
	leave := func(free int64) func() {
		var st unix.Statfs_t
		if err := unix.Statfs("/dev/shm", &st); err != nil {
			t.Fatal(err)
		}
		fill, err := os.CreateTemp("/dev/shm", "fill")
		if err != nil {
			t.Fatal(err)
		}
		defer fill.Close()
		// (A plain fallocate here failed with EINTR, a signal meeting it.)
		if err := falloc.Allocate(int(fill.Fd()), int64(st.Bavail)*st.Bsize-free); err != nil {
			os.Remove(fill.Name())
			t.Fatal(err)
		}
		return func() { os.Remove(fill.Name()) }
	}

	// Room for less than the start (a header, join slots, a page of ring
	// heads and a ring's first page per process): a clear error at Init.
	done := leave(256 << 10)
	out, errs, st := runJob(t, 16, "hello", false, "RIVET_PROVIDER=shm")
	done()
	if st == 0 || crashed(errs) {
		t.Fatalf("16 ranks in 256 KiB: status %d\n%s\n%s", st, out, errs)
	}
	for _, want := range []string{"/dev/shm has no room", "its 16 processes need 384 KiB to start (24 KiB each)", "/dev/shm has 256 KiB free of 64.0 MiB"} {
		if !strings.Contains(errs, want) {
			t.Fatalf("16 ranks in 256 KiB: no %q in\n%s", want, errs)
		}
	}

	// Room to start, not for a ring to every peer: ENOSPC at a send.
	done = leave(256 << 10)
	out, errs, st = runJob(t, 8, "everyone", false, "RIVET_PROVIDER=shm")
	done()
	if st == 0 || crashed(errs) || !strings.Contains(errs, "no space left on device") {
		t.Fatalf("8 ranks, each talking to all, in 256 KiB: status %d, want ENOSPC at a send\n%s\n%s", st, out, errs)
	}

	// The backstop: a segment in a full /dev/shm.
	done = leave(0)
	defer done()
	_, _, f, err := shmseg.Create("rivet-test", 0, 4, 4096, [8]byte{1})
	if err == nil {
		f.Close()
		t.Fatal("a segment was made in a /dev/shm without room for it")
	}
	if !strings.Contains(err.Error(), "no room") {
		t.Fatalf("a segment without room: %v, want ErrNoSpace", err)
	}
}
