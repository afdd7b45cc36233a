//go:build linux

package files

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/falloc"
	"github.com/rivet-hpc/rivet/op"
	"github.com/rivet-hpc/rivet/rma"
)

// File is a file opened collectively over a communicator (MPI_File).
// Its methods may be called from several goroutines; its collective
// calls, blocking and nonblocking, must be made in the same order at
// every member, as on a communicator.
type File struct {
	comm  *fabric.Comm // a duplicate of the opening communicator
	ep    *fabric.Endpoint
	fd    *os.File
	path  string
	mode  Mode
	hints Hints // with the defaults filled in
	me, n int
	sp    *rma.Window // the shared file pointer: a word at rank 0

	mu     sync.Mutex
	closed bool
	view   view   // this process's
	views  []view // every member's (collective access)
	pos    int64  // the individual file pointer, in etypes

	// Collective calls run one at a time, in the order they were made:
	// a nonblocking one takes its turn when it is started.
	turnMu  sync.Mutex
	turnC   *sync.Cond
	tickets uint64
	serving uint64

	cbuf  [2][]byte // aggregators' buffers (AllocMem), made on first use
	packs [][]byte  // packing buffers free for the next cycle (collective calls run one at a time)
}

// Open opens the file at path on every member of c (MPI_File_open); the
// members must give the same path, mode and hints. The file is created,
// if mode says so, by rank 0 before the others open it. Open succeeds
// at every member or at none: if any member cannot open the file, each
// returns an error — its own, or one saying which member failed and
// why, in the same class (errors.Is: ErrNoSuchFile, ErrFileExists,
// ErrAccess, ErrIO). A bad mode is ErrAMode, and so, at every member, is
// a mode that differs between members.
func Open(ctx context.Context, c *fabric.Comm, path string, mode Mode, hints Hints) (*File, error) {
	if err := mode.check(); err != nil {
		return nil, err
	}
	if err := hints.check(); err != nil {
		return nil, err
	}
	if c == nil || c.IsInter() || c.Rank() < 0 {
		return nil, fmt.Errorf("%w: files: Open needs an intracommunicator this process is a member of", fabric.ErrComm)
	}
	comm, err := c.Dup(ctx)
	if err != nil {
		return nil, err
	}
	f := &File{comm: comm, ep: c.Endpoint(), path: path, mode: mode, hints: hints.withDefaults(c.Size()), me: comm.Rank(), n: comm.Size()}
	f.turnC = sync.NewCond(&f.turnMu)
	if err := f.open(ctx); err != nil {
		comm.Free()
		return nil, err
	}
	return f, nil
}

// Codes of Open's outcome, as the members tell each other.
const (
	openOK = iota
	openNoSuchFile
	openExists
	openAccess
	openIO
	openAMode // its mode is not rank 0's
)

func openCode(err error) int64 {
	switch {
	case err == nil:
		return openOK
	case errors.Is(err, ErrNoSuchFile):
		return openNoSuchFile
	case errors.Is(err, ErrFileExists):
		return openExists
	case errors.Is(err, ErrAccess):
		return openAccess
	case errors.Is(err, ErrAMode):
		return openAMode
	}
	return openIO
}

func codeClass(code int64) error {
	return [...]error{nil, ErrNoSuchFile, ErrFileExists, ErrAccess, ErrIO, ErrAMode}[min(code, openAMode)]
}

func (f *File) open(ctx context.Context) error {
	var mine error
	try := func(create bool) {
		fd, err := os.OpenFile(f.path, f.mode.flags(create), 0o666)
		if mine = ioErr("open", f.path, err); mine == nil {
			f.fd = fd
		}
	}
	// Rank 0 creates; the others open what it made. A failure anywhere
	// is told to all: MAX over (code, rank) pairs names one. Rank 0's
	// mode comes with its outcome: a member whose mode differs does not
	// open, and every member fails with ErrAMode.
	if f.me == 0 {
		try(true)
	}
	first := []int64{openCode(mine), int64(f.mode)}
	if err := collectives.Bcast(ctx, f.comm, first, 0); err != nil {
		f.closeFD()
		return err
	}
	if first[0] != openOK {
		if mine != nil {
			return mine
		}
		return fmt.Errorf("%w: files: open %s failed at rank 0", codeClass(first[0]), f.path)
	}
	if f.me != 0 {
		if Mode(first[1]) != f.mode {
			mine = fmt.Errorf("%w: files: open %s: mode %v here, %v at rank 0 (every member must give the same)", ErrAMode, f.path, f.mode, Mode(first[1]))
		} else {
			try(false)
		}
	}
	code := openCode(mine)
	worst := []int64{code<<32 | int64(f.me)}
	if code == openOK {
		worst[0] = -1
	}
	all := []int64{0}
	if err := collectives.Allreduce(ctx, f.comm, worst, all, op.Max[int64]()); err != nil {
		f.closeFD()
		return err
	}
	if all[0] >= 0 {
		f.closeFD()
		if mine != nil {
			return mine
		}
		return fmt.Errorf("%w: files: open %s failed at rank %d", codeClass(all[0]>>32), f.path, all[0]&0xffffffff)
	}
	f.views = make([]view, f.n)
	for i := range f.views {
		f.views[i] = view{esize: 1}
	}
	f.view = f.views[f.me]
	// The shared file pointer, in rank 0's window; the passive epoch
	// lasts as long as the file is open.
	size := 0
	if f.me == 0 {
		size = 8
	}
	w, err := rma.Allocate(ctx, f.comm, size, 8, rma.Info{})
	if err == nil {
		if err = w.LockAll(ctx, 0); err != nil {
			w.Free(ctx)
		}
	}
	if err != nil {
		f.closeFD()
		return err
	}
	f.sp = w
	if f.mode&ModeAppend != 0 {
		// The pointers start at the end (MPI_MODE_APPEND).
		end, err := f.endPos()
		if err != nil {
			f.release(ctx)
			return err
		}
		f.pos = end
		if f.me == 0 {
			if _, err := rma.FetchAndOp(ctx, f.sp, end, 0, 0, op.Replace[int64]()); err != nil {
				f.release(ctx)
				return err
			}
		}
		if err := collectives.Barrier(ctx, f.comm); err != nil {
			f.release(ctx)
			return err
		}
	}
	return nil
}

func (f *File) closeFD() {
	if f.fd != nil {
		f.fd.Close()
		f.fd = nil
	}
}

// Close closes the file at every member (MPI_File_close), after every
// member's writes are in it, and deletes it if it was opened with
// ModeDeleteOnClose. Under failure it may raise at some members (MPI
// 4.1 §16.2.6); whatever it returns, it releases this process's
// resources and the handle is closed: every later call returns
// ErrClosed. Nonblocking operations must be complete first.
func (f *File) Close(ctx context.Context) error {
	done, err := f.turn()
	if err != nil {
		return err
	}
	defer done()
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	if f.comm.IsRevoked() {
		err = f.errRevoked()
	} else {
		err = collectives.Barrier(ctx, f.comm)
	}
	if f.mode&ModeDeleteOnClose != 0 {
		// Deleted once every member is done with it, and gone when
		// Close returns anywhere (unless a failure cut the wait short).
		f.closeFD()
		if f.deleter() {
			if e := os.Remove(f.path); e != nil && !errors.Is(e, os.ErrNotExist) && err == nil {
				err = ioErr("delete", f.path, e)
			}
		}
		if err == nil {
			err = collectives.Barrier(ctx, f.comm)
		}
	}
	if e := f.release(ctx); err == nil {
		err = e
	}
	return err
}

// deleter reports whether this process deletes a ModeDeleteOnClose file:
// the lowest-ranked member not known failed.
func (f *File) deleter() bool {
	failed := f.comm.GetFailed()
	g := f.comm.Group()
	for r := range f.n {
		w, _ := g.WorldRank(r)
		if failed.RankOf(w) < 0 {
			return r == f.me
		}
	}
	return false
}

// release frees f's resources here.
func (f *File) release(ctx context.Context) error {
	var first error
	if f.sp != nil {
		if !f.sp.IsRevoked() {
			if err := f.sp.UnlockAll(ctx); err != nil {
				f.sp.Revoke() // (the epoch must end before Free)
			}
		}
		if err := f.sp.Free(ctx); err != nil && !errors.Is(err, fabric.ErrRevoked) {
			first = err
		}
		f.sp = nil
	}
	if f.fd != nil {
		if err := f.fd.Close(); err != nil && first == nil {
			first = ioErr("close", f.path, err)
		}
		f.fd = nil
	}
	for i, b := range f.cbuf {
		if b != nil {
			f.ep.FreeMem(b)
			f.cbuf[i] = nil
		}
	}
	if err := f.comm.Free(); err != nil && first == nil {
		first = err
	}
	return first
}

// Delete deletes the file at path (MPI_File_delete). It is not
// collective: one process deletes.
func Delete(path string) error {
	return ioErr("delete", path, os.Remove(path))
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Mode returns the file's access mode (MPI_File_get_amode).
func (f *File) Mode() Mode { return f.mode }

// Hints returns the hints in use, defaults filled in (MPI_File_get_info).
func (f *File) Hints() Hints { return f.hints }

// Group returns the group of the processes that opened the file
// (MPI_File_get_group).
func (f *File) Group() fabric.Group { return f.comm.Group() }

// Revoke revokes the file handle at every live member (MPI_File_revoke).
// It is local and does not wait: the others learn of it through the
// fabric's reliable broadcast, the one that carries failure notices and
// communicator revokes, so every live member learns even if members die
// meanwhile. Once a member knows, its collective calls and those on the
// shared file pointer — those that involve other members — raise an
// error matching fabric.ErrRevoked, those in progress included; calls
// that involve only this process (ReadAt, WriteAt and the other
// independent accesses with explicit offsets or the individual
// pointer, Size, Seek) still work, and Close releases the handle.
func (f *File) Revoke() error {
	if err := f.live(); err != nil {
		return err
	}
	f.comm.Revoke()
	return nil
}

// IsRevoked reports whether the file handle is revoked at this process
// (MPI_File_is_revoked): by Revoke here or at another member, once its
// notice arrived.
func (f *File) IsRevoked() bool { return f.comm.IsRevoked() }

// GetFailed returns the group of the file's members this process knows
// to have failed, as Comm.GetFailed.
func (f *File) GetFailed() fabric.Group { return f.comm.GetFailed() }

func (f *File) errRevoked() error {
	return fmt.Errorf("%w: files: the file handle is revoked", fabric.ErrRevoked)
}

// live checks the handle is open.
func (f *File) live() error {
	if f == nil {
		return ErrClosed
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	return nil
}

// turn waits for a collective call's turn (see ticket); it returns the
// function that ends it.
func (f *File) turn() (func(), error) {
	t, err := f.ticket()
	if err != nil {
		return nil, err
	}
	return f.wait(t), nil
}

// ticket takes the next collective turn, in call order.
func (f *File) ticket() (uint64, error) {
	if err := f.live(); err != nil {
		return 0, err
	}
	f.turnMu.Lock()
	defer f.turnMu.Unlock()
	t := f.tickets
	f.tickets++
	return t, nil
}

// wait waits for turn t and returns the function that ends it.
func (f *File) wait(t uint64) func() {
	f.turnMu.Lock()
	for f.serving != t {
		f.turnC.Wait()
	}
	f.turnMu.Unlock()
	return func() {
		f.turnMu.Lock()
		f.serving++
		f.turnC.Broadcast()
		f.turnMu.Unlock()
	}
}

// collective starts a collective call: its turn, and the checks every
// collective makes (open, not revoked).
func (f *File) collective() (func(), error) {
	done, err := f.turn()
	if err != nil {
		return nil, err
	}
	if f.closedNow() {
		done()
		return nil, ErrClosed
	}
	if f.comm.IsRevoked() {
		done()
		return nil, f.errRevoked()
	}
	return done, nil
}

func (f *File) closedNow() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// Size returns the file's size in bytes (MPI_File_get_size).
func (f *File) Size() (int64, error) {
	if err := f.live(); err != nil {
		return 0, err
	}
	st, err := f.fd.Stat()
	if err != nil {
		return 0, ioErr("stat", f.path, err)
	}
	return st.Size(), nil
}

// SetSize truncates or extends the file to size bytes (MPI_File_set_size);
// collective, with the same size at every member.
func (f *File) SetSize(ctx context.Context, size int64) error {
	if size < 0 {
		return fmt.Errorf("%w: files: size %d", fabric.ErrInvalid, size)
	}
	return f.atRoot(ctx, "truncate", func() error { return f.fd.Truncate(size) })
}

// Preallocate makes sure the file system has allocated its first size
// bytes (MPI_File_preallocate), extending the file if it is shorter;
// collective. Where the file system cannot preallocate, the file is
// extended without. Signals do not stop it (on tmpfs each one interrupts
// fallocate(2); see internal/falloc).
func (f *File) Preallocate(ctx context.Context, size int64) error {
	if size < 0 {
		return fmt.Errorf("%w: files: size %d", fabric.ErrInvalid, size)
	}
	return f.atRoot(ctx, "preallocate", func() error {
		err := falloc.Allocate(int(f.fd.Fd()), size)
		if errors.Is(err, syscall.EOPNOTSUPP) {
			var st os.FileInfo
			if st, err = f.fd.Stat(); err == nil && st.Size() < size {
				err = f.fd.Truncate(size)
			}
		}
		return err
	})
}

// atRoot runs do at rank 0 and tells every member how it went.
func (f *File) atRoot(ctx context.Context, what string, do func() error) error {
	if !f.mode.canWrite() {
		return fmt.Errorf("%w: %s of a file opened %v", ErrReadOnly, what, f.mode)
	}
	done, err := f.collective()
	if err != nil {
		return err
	}
	defer done()
	var mine error
	code := []int64{0}
	if f.me == 0 {
		if mine = ioErr(what, f.path, do()); mine != nil {
			code[0] = openCode(mine)
		}
	}
	if err := collectives.Bcast(ctx, f.comm, code, 0); err != nil {
		return err
	}
	if mine != nil {
		return mine
	}
	if code[0] != 0 {
		return fmt.Errorf("%w: files: %s %s failed at rank 0", codeClass(code[0]), what, f.path)
	}
	return nil
}

// Sync writes this process's writes to the storage device and waits
// until every member has (MPI_File_sync): after it, what any member
// wrote is visible to every member's reads.
func (f *File) Sync(ctx context.Context) error {
	done, err := f.collective()
	if err != nil {
		return err
	}
	defer done()
	var mine error
	if f.mode.canWrite() {
		mine = ioErr("sync", f.path, f.fd.Sync())
	}
	if err := collectives.Barrier(ctx, f.comm); err != nil {
		return err
	}
	return mine
}

// SetView sets this process's view of the file (MPI_File_set_view): it
// sees the file from byte disp on, in etypes of etype bytes, through
// filetype ft. Collective; the members may give different views but
// the same etype size. It resets the individual and shared file
// pointers to 0.
func (f *File) SetView(ctx context.Context, disp int64, etype int, ft Filetype) error {
	if _, err := makeView(disp, etype, ft); err != nil {
		return err
	}
	done, err := f.collective()
	if err != nil {
		return err
	}
	defer done()
	if f.me == 0 {
		if _, err := rma.FetchAndOp(ctx, f.sp, 0, 0, 0, op.Replace[int64]()); err != nil {
			return err
		}
	}
	// Every member's view, for collective access: its header, then its
	// blocks.
	hdr := []int64{disp, int64(etype), ft.extent, int64(len(ft.blocks))}
	all := make([]int64, 4*f.n)
	if err := collectives.Allgather(ctx, f.comm, hdr, all); err != nil {
		return err
	}
	counts, displs := make([]int, f.n), make([]int, f.n)
	total := 0
	for r := range f.n {
		if all[4*r+1] != int64(etype) {
			return fmt.Errorf("%w: rank %d's etype is %d bytes, this one's %d", ErrView, r, all[4*r+1], etype)
		}
		counts[r], displs[r] = 2*int(all[4*r+3]), total
		total += counts[r]
	}
	mine := make([]int64, 0, 2*len(ft.blocks))
	for _, b := range ft.blocks {
		mine = append(mine, b.Off, b.Len)
	}
	blocks := make([]int64, total)
	if err := collectives.Allgatherv(ctx, f.comm, mine, blocks, counts, displs); err != nil {
		return err
	}
	views := make([]view, f.n)
	for r := range f.n {
		t := Filetype{extent: all[4*r+2]}
		for i := 0; i < counts[r]; i += 2 {
			t.blocks = append(t.blocks, Block{blocks[displs[r]+i], blocks[displs[r]+i+1]})
		}
		if views[r], err = makeView(all[4*r], etype, t); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.views, f.view, f.pos = views, views[f.me], 0
	f.mu.Unlock()
	return nil
}

// endPos is the individual pointer's position at the end of the file,
// in etypes of this process's view.
func (f *File) endPos() (int64, error) {
	size, err := f.Size()
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	v := f.view
	f.mu.Unlock()
	return (v.visible(size) + v.esize - 1) / v.esize, nil
}
