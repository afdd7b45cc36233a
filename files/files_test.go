//go:build linux

package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// Tests run programs as the ranks of a job (internal/jobtest), over
// shared memory on the host and over verbs in the soft-RoCE VM; the
// job's files go in a directory the test makes (FILES_DIR).
const progEnv = "RIVET_FILES_PROG"

var progs = jobtest.Programs[*fabric.Endpoint]{
	Env:   progEnv,
	Init:  func(ctx context.Context) (*fabric.Endpoint, error) { return fabric.Init(ctx) },
	Close: (*fabric.Endpoint).Close,
	Rank:  func(ep *fabric.Endpoint) int { return ep.World().Rank() },
}

func TestMain(m *testing.M) { progs.Main(m) }

var (
	failf = jobtest.Failf
	must  = jobtest.Must
)

// providers: shared memory on the host; verbs in the VM.
func providers(t *testing.T) map[string][]string {
	if os.Getenv("RIVET_RXE_DEVICES") == "" && os.Getenv(testutil.RequireEnv) != "1" {
		return map[string][]string{"shm": {"RIVET_PROVIDER=shm"}}
	}
	devs := testutil.RXEDevices(t)
	return map[string][]string{"verbs": {"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + devs[0]}}
}

func runProg(t *testing.T, prog string, ranks ...int) {
	for name, env := range providers(t) {
		for _, n := range ranks {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				progs.OK(t, n, prog, append(env, "FILES_DIR="+t.TempDir())...)
			})
		}
	}
}

func dir() string { return os.Getenv("FILES_DIR") }

func init() {
	progs.Add("open", progOpen)
	progs.Add("layouts", progLayouts)
	progs.Add("pointers", progPointers)
	progs.Add("nonblocking", progNonblocking)
	progs.Add("revoke", progRevoke)
}

func TestOpen(t *testing.T)        { runProg(t, "open", 2) }
func TestLayouts(t *testing.T)     { runProg(t, "layouts", 1, 3, 4) }
func TestPointers(t *testing.T)    { runProg(t, "pointers", 3) }
func TestNonblocking(t *testing.T) { runProg(t, "nonblocking", 2) }
func TestRevoke(t *testing.T)      { runProg(t, "revoke", 3) }

func wantErr(err, class error, what string) {
	if !errors.Is(err, class) {
		failf("%s: %v, want %v", what, err, class)
	}
}

// progOpen: access modes, the errors of opening, the file's size, and
// what Close does.
func progOpen(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	p := filepath.Join(dir(), "open")
	for _, m := range []Mode{0, ModeRdOnly | ModeWrOnly, ModeRdOnly | ModeCreate, ModeWrOnly | ModeExcl, ModeRdWr | 1<<20} {
		_, err := Open(ctx, c, p, m, Hints{})
		wantErr(err, ErrAMode, fmt.Sprintf("mode %v", m))
		wantErr(err, fabric.ErrInvalid, fmt.Sprintf("mode %v", m))
	}
	_, err := Open(ctx, c, p, ModeRdOnly, Hints{})
	wantErr(err, ErrNoSuchFile, "missing file")
	wantErr(err, fs.ErrNotExist, "missing file")
	_, err = Open(ctx, c, "/sys/kernel/notes", ModeWrOnly, Hints{})
	wantErr(err, ErrAccess, "no permission")
	wantErr(err, fs.ErrPermission, "no permission")
	_, err = Open(ctx, c, p, ModeRdWr, Hints{Aggregators: -1})
	wantErr(err, fabric.ErrInvalid, "bad hints")
	// Modes that differ between members, each valid: ErrAMode at every
	// member (the others see rank 0's).
	m := ModeCreate | ModeRdWr
	if c.Rank() == c.Size()-1 {
		m = ModeCreate | ModeWrOnly
	}
	_, err = Open(ctx, c, p, m, Hints{})
	wantErr(err, ErrAMode, fmt.Sprintf("mode %v at rank %d, another elsewhere", m, c.Rank()))
	os.Remove(p) // (rank 0 may have created it)
	must(collectives.Barrier(ctx, c), "barrier")

	f, err := Open(ctx, c, p, ModeCreate|ModeExcl|ModeRdWr, Hints{})
	must(err, "create")
	_, err = Open(ctx, c, p, ModeCreate|ModeExcl|ModeWrOnly, Hints{})
	wantErr(err, ErrFileExists, "exclusive create of an existing file")
	must(f.Preallocate(ctx, 1<<20), "preallocate")
	if n, err := f.Size(); err != nil || n != 1<<20 {
		failf("size after Preallocate: %d, %v", n, err)
	}
	must(collectives.Barrier(ctx, c), "barrier") // (a collective call need not synchronize)
	must(f.SetSize(ctx, 100), "set size")
	if n, _ := f.Size(); n != 100 {
		failf("size after SetSize(100): %d", n)
	}
	must(collectives.Barrier(ctx, c), "barrier")
	must(f.SetSize(ctx, 0), "set size 0")
	if _, err := f.WriteAt(int64(c.Rank()*4), []byte("abcd")); err != nil {
		failf("write: %v", err)
	}
	must(f.Sync(ctx), "sync")
	if n, _ := f.Size(); n != int64(4*c.Size()) {
		failf("size after every rank wrote 4 bytes: %d", n)
	}
	must(f.Close(ctx), "close")
	if _, err := f.WriteAt(0, []byte("x")); !errors.Is(err, ErrClosed) {
		failf("write after close: %v", err)
	}
	wantErr(f.Close(ctx), ErrClosed, "second close")

	// Read only; append; delete on close.
	r, err := Open(ctx, c, p, ModeRdOnly, Hints{})
	must(err, "open read only")
	_, err = r.WriteAt(0, []byte("x"))
	wantErr(err, ErrReadOnly, "write to a read-only file")
	wantErr(r.SetSize(ctx, 0), ErrReadOnly, "SetSize of a read-only file")
	b := make([]byte, 8)
	if n, err := r.ReadAt(int64(4*c.Size()-4), b); n != 4 || err != io.EOF || string(b[:4]) != "abcd" {
		failf("read at the end: %d %v %q", n, err, b[:n])
	}
	must(r.Close(ctx), "close read only")
	a, err := Open(ctx, c, p, ModeWrOnly|ModeAppend|ModeDeleteOnClose, Hints{})
	must(err, "open append")
	if pos := a.Position(); pos != int64(4*c.Size()) {
		failf("append: individual pointer at %d", pos)
	}
	if pos, err := a.PositionShared(ctx); err != nil || pos != int64(4*c.Size()) {
		failf("append: shared pointer at %d, %v", pos, err)
	}
	_, err = a.Read(b)
	wantErr(err, ErrReadOnly, "read of a write-only file")
	must(a.Close(ctx), "close append")
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		failf("ModeDeleteOnClose: the file is still there (%v)", err)
	}
	must(collectives.Barrier(ctx, c), "barrier")
	wantErr(Delete(p), ErrNoSuchFile, "Delete of a deleted file")
	return nil
}
