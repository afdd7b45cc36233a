//go:build linux

package fabric

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
)

func init() { progs.Add("hello", func(context.Context, *Endpoint) error { return nil }) }

// smallShmEnv runs TestSmallShm's body: in a mount namespace whose
// /dev/shm is a 64 MiB tmpfs, as Docker gives a container by default.
const smallShmEnv = "FABRIC_TEST_SMALL_SHM"

// TestSmallShm: a node whose /dev/shm cannot hold the job's shared
// memory is a clear error at Init, at every rank, naming the size needed
// and the size there — 16 ranks in Docker's default 64 MiB died of
// SIGBUS, with thousands of lines of goroutine dumps — while 8 ranks,
// which fit, run. And a segment the file system cannot give pages for is
// an error where it is made (ErrNoSpace), not a SIGBUS at its first use.
func TestSmallShm(t *testing.T) {
	if os.Getenv(smallShmEnv) == "1" {
		smallShm(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, for a mount namespace with a /dev/shm of its own")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare (util-linux)")
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" -test.run='^TestSmallShm$' -test.v`, os.Args[0])
	cmd.Env = append(os.Environ(), smallShmEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSmallShm") {
		t.Fatalf("in a namespace with a 64 MiB /dev/shm: %v\n%s", err, out)
	}
}

func smallShm(t *testing.T) {
	out, errs, st := runJob(t, 16, "hello", false, "RIVET_PROVIDER=shm")
	if st == 0 || strings.Contains(errs, "SIGBUS") || strings.Contains(errs, "unexpected fault address") {
		t.Fatalf("16 ranks in 64 MiB: status %d\n%s\n%s", st, out, errs)
	}
	for _, want := range []string{"/dev/shm has no room", "its 16 processes need 249.1 MiB", "/dev/shm has 64.0 MiB free of 64.0 MiB"} {
		if !strings.Contains(errs, want) {
			t.Fatalf("16 ranks in 64 MiB: no %q in\n%s", want, errs)
		}
	}
	runOK(t, 8, "hello", "RIVET_PROVIDER=shm")

	// The backstop: a segment in a full /dev/shm.
	fill, err := os.CreateTemp("/dev/shm", "fill")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(fill.Name())
	defer fill.Close()
	for chunk := make([]byte, 64<<10); ; { // until /dev/shm is full
		if _, err := fill.Write(chunk); err != nil {
			break
		}
	}
	_, _, f, err := shmseg.Create("rivet-test", 0, 4, 4096, [8]byte{1})
	if err == nil {
		f.Close()
		t.Fatal("a segment was made in a /dev/shm without room for it")
	}
	if !strings.Contains(err.Error(), "no room") {
		t.Fatalf("a segment without room: %v, want ErrNoSpace", err)
	}
}
