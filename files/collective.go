//go:build linux

package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"syscall"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

// Collective data access. Every member knows every member's view (from
// SetView), so one Allgather of each member's offset and length tells
// every member where every byte of the call goes. Then, if the accesses
// interleave in small pieces (Hints), two-phase I/O: the file range the
// call covers is cut into one domain per aggregator, and in cycles of
// the aggregators' buffer size each member sends an aggregator the
// pieces that fall in its domain's current window — a piece straight
// from the member's buffer into its place in the aggregator's buffer, or
// small pieces packed in one message — and the aggregator writes the
// window's data in as few large writes as it is contiguous, while the
// next window's data arrives in its other buffer. Reads run the other
// way, each window read in one call (holes included) and its next read
// ahead. At the end each aggregator tells each member whose data it
// handled whether its file system calls succeeded.
//
// A failure (MPI 4.1 §16.2.6): an aggregator that fails leaves the
// members' data in its domain undefined — their calls raise an IOError
// that lists those ranges and matches fabric.ErrProcFailed; a member
// that fails loses only its own data, the aggregators write everyone
// else's, and raise. Members that did not exchange with a failed
// process may return success: use ft.Agree on a communicator of the
// same group to learn whether the call succeeded everywhere. A member at
// which the first exchange (the Allgather of where every byte goes)
// raises on a failure moves nothing and revokes the file: members at
// which it completed would otherwise wait for its data for good.

// WriteAtAll writes buf at offset off of each member's view,
// collectively (MPI_File_write_at_all).
func (f *File) WriteAtAll(ctx context.Context, off int64, buf []byte) (int, error) {
	t, err := f.ticket()
	if err != nil {
		return 0, err
	}
	return f.all(ctx, t, true, off, buf)
}

// ReadAtAll reads into buf from offset off of each member's view,
// collectively (MPI_File_read_at_all).
func (f *File) ReadAtAll(ctx context.Context, off int64, buf []byte) (int, error) {
	t, err := f.ticket()
	if err != nil {
		return 0, err
	}
	return f.all(ctx, t, false, off, buf)
}

// WriteAll is WriteAtAll at the individual file pointer, which moves
// past what it wrote (MPI_File_write_all).
func (f *File) WriteAll(ctx context.Context, buf []byte) (int, error) {
	off, err := f.advance(buf)
	if err != nil {
		return 0, err
	}
	return f.WriteAtAll(ctx, off, buf)
}

// ReadAll is ReadAtAll at the individual file pointer (MPI_File_read_all).
func (f *File) ReadAll(ctx context.Context, buf []byte) (int, error) {
	off, err := f.advance(buf)
	if err != nil {
		return 0, err
	}
	return f.ReadAtAll(ctx, off, buf)
}

// IWriteAtAll starts WriteAtAll (MPI_File_iwrite_at_all). It takes its
// place among the file's collective calls when it starts.
func (f *File) IWriteAtAll(off int64, buf []byte) (*Request, error) {
	t, err := f.ticket()
	if err != nil {
		return nil, err
	}
	return start(func() (int, error) { return f.all(context.Background(), t, true, off, buf) }), nil
}

// IReadAtAll starts ReadAtAll (MPI_File_iread_at_all).
func (f *File) IReadAtAll(off int64, buf []byte) (*Request, error) {
	t, err := f.ticket()
	if err != nil {
		return nil, err
	}
	return start(func() (int, error) { return f.all(context.Background(), t, false, off, buf) }), nil
}

// IWriteAll starts WriteAll (MPI_File_iwrite_all); the individual
// pointer moves at once.
func (f *File) IWriteAll(buf []byte) (*Request, error) {
	off, err := f.advance(buf)
	if err != nil {
		return nil, err
	}
	return f.IWriteAtAll(off, buf)
}

// IReadAll starts ReadAll (MPI_File_iread_all).
func (f *File) IReadAll(buf []byte) (*Request, error) {
	off, err := f.advance(buf)
	if err != nil {
		return nil, err
	}
	return f.IReadAtAll(off, buf)
}

// The header each member gives a collective access.
const (
	hPos  = iota // the byte of its view it starts at
	hLen         // its bytes
	hRuns        // how many file runs they make
	hLo          // the first file byte
	hHi          // one past the last
	hBad         // its arguments are invalid
	hWords
)

// plan is a collective access as every member sees it.
type plan struct {
	f       *File
	write   bool
	tag     int
	hdr     []int64 // hWords per member
	lo, hi  int64
	aggs    []int // aggregator i's rank
	dsize   int64 // each domain's size
	bsize   int64 // a window's
	cycles  int
	runs    [][]run // by member: those this process needs
	mine    []run
	buf     []byte
	failed  map[int]error // aggregator index: why its data is undefined here
	srcErr  error         // the first failure of a member whose data this aggregator handles
	ioErr   error         // this aggregator's file system error
	touched []bool        // by member: this aggregator handled its data
	used    [][]byte      // this cycle's packing buffers
}

func (f *File) all(ctx context.Context, t uint64, write bool, off int64, buf []byte) (int, error) {
	done := f.wait(t)
	defer done()
	if f.closedNow() {
		return 0, ErrClosed
	}
	v, bad := f.check(write, off, buf)
	p := &plan{f: f, write: write, tag: int(t%(1<<20)) * 2, buf: buf}
	hdr := make([]int64, hWords)
	if bad == nil {
		p.mine = v.runs(off*v.esize, int64(len(buf)), nil)
		hdr[hPos], hdr[hLen], hdr[hRuns] = off*v.esize, int64(len(buf)), int64(len(p.mine))
		if len(p.mine) > 0 {
			last := p.mine[len(p.mine)-1]
			hdr[hLo], hdr[hHi] = p.mine[0].file, last.file+last.n
		}
	} else {
		hdr[hBad] = 1
	}
	p.hdr = make([]int64, hWords*f.n)
	var err error
	if f.comm.IsRevoked() {
		// Revoked before the call, by a member at which an earlier
		// exchange raised (or by the program): nothing moves, and the
		// call raises as one cut short in the exchange does.
		err = f.errRevoked()
	} else {
		if testHookHeaders != nil {
			testHookHeaders(true, nil)
		}
		err = collectives.Allgather(ctx, f.comm, hdr, p.hdr)
		if testHookHeaders != nil {
			err = testHookHeaders(false, err)
		}
	}
	if err != nil {
		if bad == nil && (errors.Is(err, fabric.ErrProcFailed) || errors.Is(err, fabric.ErrRevoked)) {
			// Cut short before any byte moved: all of this process's
			// bytes are undefined. A collective may raise at some
			// members and complete at others, which then wait in the
			// exchange for data this process will not send: the revoke
			// ends their waits (their calls raise too). A file with a
			// failed member can serve no more collective calls anyway;
			// its independent accesses still work.
			if errors.Is(err, fabric.ErrProcFailed) {
				f.comm.Revoke()
			}
			return 0, &IOError{Op: p.op(), Undefined: rangesOf(p.mine), Err: err}
		}
		return 0, err
	}
	if bad != nil {
		return 0, bad
	}
	var total, runs int64
	p.lo, p.hi = -1, -1
	type span struct{ lo, hi int64 }
	var spans []span
	for r := range f.n {
		h := p.hdr[r*hWords:]
		if h[hBad] != 0 {
			return 0, fmt.Errorf("%w: files: rank %d's arguments to the collective access are invalid", fabric.ErrInvalid, r)
		}
		if h[hLen] == 0 {
			continue
		}
		total += h[hLen]
		runs += h[hRuns]
		spans = append(spans, span{h[hLo], h[hHi]})
		if p.lo < 0 || h[hLo] < p.lo {
			p.lo = h[hLo]
		}
		p.hi = max(p.hi, h[hHi])
	}
	if total == 0 {
		return 0, nil
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.lo - b.lo) })
	interleave := false
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			interleave = true
		}
	}
	h := f.hints
	if h.Buffering == BufferingOff || h.Buffering == BufferingAuto && (!interleave || total/runs >= h.directMin()) {
		var n int
		var err error
		if write {
			n, err = f.pwrite(p.mine, buf)
		} else {
			n, err = f.pread(p.mine, buf)
		}
		return n, err
	}
	size := int64(-1)
	if !write { // (where the file ends, for the count read; not on the direct path, which reads it)
		st, err := f.fd.Stat()
		if err != nil {
			return 0, ioErr("stat", f.path, err)
		}
		size = st.Size()
	}
	if err := p.twoPhase(ctx); err != nil {
		return 0, err
	}
	return p.result(size)
}

// op names the call, for its IOError.
func (p *plan) op() string {
	if p.write {
		return "WriteAtAll"
	}
	return "ReadAtAll"
}

// rangesOf is runs as file ranges, adjacent ones joined.
func rangesOf(rs []run) []Range {
	var out []Range
	for _, q := range merge(rs) {
		out = append(out, Range{q.file, q.n})
	}
	return out
}

// twoPhase sets up and runs the exchange; it returns an error only when
// nothing was done.
func (p *plan) twoPhase(ctx context.Context) error {
	f := p.f
	a := f.hints.Aggregators
	p.aggs = make([]int, a)
	me := -1
	for i := range a {
		p.aggs[i] = i * f.n / a
		if p.aggs[i] == f.me {
			me = i
		}
	}
	span := p.hi - p.lo
	p.dsize = max(((span+int64(a)-1)/int64(a)+4095)&^4095, 4096) // (whole pages)
	p.bsize = min(int64(f.hints.BufferSize), p.dsize)
	p.cycles = int((p.dsize + p.bsize - 1) / p.bsize)
	p.runs = make([][]run, f.n)
	p.runs[f.me] = p.mine
	p.failed = map[int]error{}
	if me >= 0 {
		p.touched = make([]bool, f.n)
		for r := range f.n {
			if r != f.me {
				h := p.hdr[r*hWords:]
				p.runs[r] = f.views[r].runs(h[hPos], h[hLen], nil)
			}
		}
		for k := range 2 {
			if f.cbuf[k] == nil {
				b, err := f.ep.AllocMem(f.hints.BufferSize)
				if err != nil {
					return err
				}
				f.cbuf[k] = b
			}
		}
	}
	if p.write {
		p.writeCycles(ctx, me)
	} else {
		p.readCycles(ctx, me)
	}
	p.statuses(ctx, me)
	return nil
}

// testHookCycle, if set, runs as each cycle of a collective write
// starts: tests kill a process there.
var testHookCycle func(c int)

// testHookHeaders, if set, runs before the header exchange of a
// collective access (before true) and after it, with its error, which it
// may replace: tests kill a process there, or make the exchange raise
// at one member as a failure can.
var testHookHeaders func(before bool, err error) error

// window is aggregator i's file range in cycle c.
func (p *plan) window(i, c int) (lo, hi int64) {
	dlo := p.lo + int64(i)*p.dsize
	dhi := min(dlo+p.dsize, p.hi)
	lo = dlo + int64(c)*p.bsize
	return lo, max(lo, min(lo+p.bsize, dhi))
}

// domain is aggregator i's file range.
func (p *plan) domain(i int) (lo, hi int64) {
	lo = p.lo + int64(i)*p.dsize
	return lo, max(lo, min(lo+p.dsize, p.hi))
}

// pieces appends the parts of rs within [lo, hi) to out.
func pieces(rs []run, lo, hi int64, out []run) []run {
	if lo >= hi {
		return out
	}
	i := sort.Search(len(rs), func(i int) bool { return rs[i].file+rs[i].n > lo })
	for ; i < len(rs) && rs[i].file < hi; i++ {
		r := rs[i]
		if r.file < lo {
			d := lo - r.file
			r.file, r.buf, r.n = lo, r.buf+d, r.n-d
		}
		if e := r.file + r.n; e > hi {
			r.n -= e - hi
		}
		out = append(out, r)
	}
	return out
}

// directPiece is the size from which pieces travel as messages of their
// own, straight between the buffers, rather than packed.
const directPiece = 64 << 10

func direct(ps []run) bool {
	if len(ps) == 1 {
		return true
	}
	for _, r := range ps {
		if r.n < directPiece {
			return false
		}
	}
	return true
}

func bytesOf(ps []run) int64 {
	var n int64
	for _, r := range ps {
		n += r.n
	}
	return n
}

// xfer is one side of the exchange of a cycle with one peer: requests
// posted, and a packed buffer to unpack.
type xfer struct {
	peer   int
	reqs   []fabric.Request
	packed []byte
	ps     []run
	err    error // a request that could not start
}

func (p *plan) writeCycles(ctx context.Context, me int) {
	f := p.f
	var pending [2]chan error
	var sends, recvs []xfer
	var mine, all []run
	for c := range p.cycles {
		cur := c & 1
		if testHookCycle != nil {
			testHookCycle(c)
		}
		if f.comm.IsRevoked() {
			p.abandon(f.errRevoked())
			break
		}
		var cb []byte
		var wlo, whi int64
		if me >= 0 {
			if pending[cur] != nil {
				if err := <-pending[cur]; err != nil && p.ioErr == nil {
					p.ioErr = err
				}
				pending[cur] = nil
			}
			cb = f.cbuf[cur]
			wlo, whi = p.window(me, c)
			recvs = recvs[:0]
			all = all[:0]
			for r := range f.n {
				ps := pieces(p.runs[r], wlo, whi, nil)
				if len(ps) == 0 {
					continue
				}
				p.touched[r] = true
				all = append(all, ps...)
				if r == f.me {
					for _, q := range ps {
						copy(cb[q.file-wlo:q.file-wlo+q.n], p.buf[q.buf:q.buf+q.n])
					}
					continue
				}
				x := xfer{peer: r, ps: ps}
				p.recvPieces(&x, ps, inWindow(cb, wlo), r)
				recvs = append(recvs, x)
			}
		}
		sends = sends[:0]
		for i, agg := range p.aggs {
			if agg == f.me || p.failed[i] != nil {
				continue
			}
			lo, hi := p.window(i, c)
			mine = pieces(p.mine, lo, hi, mine[:0])
			if len(mine) == 0 {
				continue
			}
			x := xfer{peer: i}
			p.sendPieces(&x, mine, p.user, agg)
			sends = append(sends, x)
		}
		// The data of members whose messages failed is left out.
		for _, x := range recvs {
			if err := x.wait(ctx); err != nil {
				if p.srcErr == nil {
					p.srcErr = err
				}
				all = slices.DeleteFunc(all, func(q run) bool { return slices.Contains(x.ps, q) })
				continue
			}
			if x.packed != nil {
				at := int64(0)
				for _, q := range x.ps {
					copy(cb[q.file-wlo:q.file-wlo+q.n], x.packed[at:at+q.n])
					at += q.n
				}
			}
		}
		for _, x := range sends {
			if err := x.wait(ctx); err != nil {
				p.failed[x.peer] = err
			}
		}
		p.unpack(ctx)
		if me >= 0 && len(all) > 0 {
			extents := merge(all)
			ch := make(chan error, 1)
			pending[cur] = ch
			go func() {
				for _, e := range extents {
					if _, err := f.fd.WriteAt(cb[e.file-wlo:e.file-wlo+e.n], e.file); err != nil {
						ch <- ioErr("write", f.path, err)
						return
					}
				}
				ch <- nil
			}()
		}
	}
	for _, ch := range pending {
		if ch != nil {
			if err := <-ch; err != nil && p.ioErr == nil {
				p.ioErr = err
			}
		}
	}
}

// merge sorts pieces by file offset and joins the adjacent ones.
func merge(ps []run) []run {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b run) int { return int(a.file - b.file) })
	k := 0
	for _, q := range out {
		if k > 0 && out[k-1].file+out[k-1].n >= q.file {
			out[k-1].n = max(out[k-1].n, q.file+q.n-out[k-1].file)
			continue
		}
		out[k] = q
		k++
	}
	return out[:k]
}

func (p *plan) readCycles(ctx context.Context, me int) {
	f := p.f
	type read struct {
		lo, n int64
		err   error
	}
	var ahead [2]chan read
	var all []run
	// fetch reads aggregator me's data in window c into its buffer.
	fetch := func(c int) chan read {
		ch := make(chan read, 1)
		wlo, whi := p.window(me, c)
		all = all[:0]
		for r := range f.n {
			all = pieces(p.runs[r], wlo, whi, all)
		}
		if len(all) == 0 {
			ch <- read{}
			return ch
		}
		lo, hi := all[0].file, all[0].file+all[0].n
		for _, q := range all {
			lo, hi = min(lo, q.file), max(hi, q.file+q.n)
		}
		cb := f.cbuf[c&1][lo-wlo : hi-wlo]
		go func() {
			k, err := f.fd.ReadAt(cb, lo)
			if err == io.EOF {
				clear(cb[k:]) // past the end reads as zeros; the count says where the end was
				err = nil
			}
			ch <- read{lo, hi - lo, ioErr("read", f.path, err)}
		}()
		return ch
	}
	if me >= 0 {
		ahead[0] = fetch(0)
	}
	var sends, recvs []xfer
	var mine []run
	for c := range p.cycles {
		cur := c & 1
		if f.comm.IsRevoked() {
			p.abandon(f.errRevoked())
			break
		}
		sends = sends[:0]
		var cb []byte
		var wlo int64
		if me >= 0 {
			rd := <-ahead[cur]
			ahead[cur] = nil
			if rd.err != nil && p.ioErr == nil {
				p.ioErr = rd.err
			}
			if c+1 < p.cycles {
				ahead[cur^1] = fetch(c + 1)
			}
			cb = f.cbuf[cur]
			wlo, _ = p.window(me, c)
			_, whi := p.window(me, c)
			for r := range f.n {
				ps := pieces(p.runs[r], wlo, whi, nil)
				if len(ps) == 0 {
					continue
				}
				p.touched[r] = true
				if r == f.me {
					for _, q := range ps {
						copy(p.buf[q.buf:q.buf+q.n], cb[q.file-wlo:q.file-wlo+q.n])
					}
					continue
				}
				x := xfer{peer: r}
				p.sendPieces(&x, ps, inWindow(cb, wlo), r)
				sends = append(sends, x)
			}
		}
		recvs = recvs[:0]
		for i, agg := range p.aggs {
			if agg == f.me || p.failed[i] != nil {
				continue
			}
			lo, hi := p.window(i, c)
			mine = pieces(p.mine, lo, hi, mine[:0])
			if len(mine) == 0 {
				continue
			}
			x := xfer{peer: i, ps: slices.Clone(mine)}
			p.recvPieces(&x, mine, p.user, agg)
			recvs = append(recvs, x)
		}
		for _, x := range recvs {
			if err := x.wait(ctx); err != nil {
				p.failed[x.peer] = err
				continue
			}
			if x.packed != nil {
				at := int64(0)
				for _, q := range x.ps {
					copy(p.buf[q.buf:q.buf+q.n], x.packed[at:at+q.n])
					at += q.n
				}
			}
		}
		for _, x := range sends {
			if err := x.wait(ctx); err != nil && p.srcErr == nil {
				p.srcErr = err
			}
		}
		p.unpack(ctx)
	}
	// A read ahead that an abandoned exchange left running must end
	// before the buffers serve another call.
	for _, ch := range ahead {
		if ch != nil {
			<-ch
		}
	}
}

// abandon stops the exchange (the file was revoked): this process's
// data in every aggregator's domain is undefined.
func (p *plan) abandon(err error) {
	for i := range p.aggs {
		if p.failed[i] == nil {
			p.failed[i] = err
		}
	}
	if p.srcErr == nil {
		p.srcErr = err
	}
}

// statuses: each aggregator tells each member whose data it handled how
// its file system calls went (0, or the errno); a member whose
// aggregator failed, or says so, has its data in that domain undefined.
func (p *plan) statuses(ctx context.Context, me int) {
	f := p.f
	var sends []fabric.Request
	if me >= 0 {
		code := int64(0)
		if p.ioErr != nil {
			code = -1
			if errno := syscall.Errno(0); errors.As(p.ioErr, &errno) {
				code = int64(errno)
			}
		}
		word := []int64{code}
		for r, t := range p.touched {
			if t && r != f.me {
				q, err := fabric.IsendSlice(f.comm, word, r, p.tag+1)
				if err == nil {
					sends = append(sends, q)
				}
			}
		}
		if p.ioErr != nil {
			p.failed[me] = p.ioErr
		}
	}
	word := make([]int64, 1)
	for i, agg := range p.aggs {
		if agg == f.me || p.failed[i] != nil {
			continue
		}
		lo, hi := p.domain(i)
		if len(pieces(p.mine, lo, hi, nil)) == 0 {
			continue
		}
		if _, err := fabric.RecvSlice(ctx, f.comm, word, agg, p.tag+1); err != nil {
			p.failed[i] = err
		} else if word[0] != 0 {
			p.failed[i] = fmt.Errorf("%w: at aggregator rank %d: %v", ErrIO, agg, syscall.Errno(max(word[0], 0)))
		}
	}
	for i := range sends {
		sends[i].Wait(ctx) // a member that failed meanwhile is no news
	}
}

// result is what the call returns here: the bytes done, and an IOError
// naming the undefined ranges if any.
func (p *plan) result(size int64) (int, error) {
	var undef []Range
	var cause error
	for i := range p.aggs {
		err := p.failed[i]
		if err == nil {
			continue
		}
		if cause == nil {
			cause = err
		}
		lo, hi := p.domain(i)
		for _, q := range pieces(p.mine, lo, hi, nil) {
			undef = append(undef, Range{q.file, q.n})
		}
	}
	if cause == nil {
		cause = p.srcErr
	}
	if cause != nil && !errors.Is(cause, fabric.ErrProcFailed) && errors.Is(cause, fabric.ErrRevoked) {
		// Revoked because a member failed (see all): say which.
		if g := p.f.comm.GetFailed(); g.Size() > 0 {
			w, _ := g.WorldRank(0)
			if ferr := p.f.ep.Failure(w); ferr != nil {
				cause = fmt.Errorf("%w, after a member's failure: %w", cause, ferr)
			}
		}
	}
	n := int64(len(p.buf))
	if size >= 0 {
		// A read counts the bytes before the end of the file.
		for _, q := range p.mine {
			if q.file+q.n > size {
				n = q.buf + max(size-q.file, 0)
				break
			}
		}
	}
	if cause != nil {
		slices.SortFunc(undef, func(a, b Range) int { return int(a.Off - b.Off) })
		return int(n - rangeBytes(undef)), &IOError{Op: p.op(), Undefined: undef, Err: cause}
	}
	if n < int64(len(p.buf)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

func rangeBytes(rs []Range) int64 {
	var n int64
	for _, r := range rs {
		n += r.Len
	}
	return n
}

// sendPieces posts the pieces ps on x to dest, where at(q) is piece q's
// bytes here: one message per piece when they are large enough to move
// in place (direct), else one message packing them all.
func (p *plan) sendPieces(x *xfer, ps []run, at func(run) []byte, dest int) {
	if direct(ps) {
		for _, q := range ps {
			p.isend(x, at(q), dest)
		}
		return
	}
	b := p.pack(bytesOf(ps))[:0]
	for _, q := range ps {
		b = append(b, at(q)...)
	}
	p.isend(x, b, dest)
}

// recvPieces is sendPieces' receiving side: packed messages land in
// x.packed, for the caller to spread once they have arrived.
func (p *plan) recvPieces(x *xfer, ps []run, at func(run) []byte, src int) {
	if direct(ps) {
		for _, q := range ps {
			p.irecv(x, at(q), src)
		}
		return
	}
	x.packed = p.pack(bytesOf(ps))
	p.irecv(x, x.packed, src)
}

// pack returns a packing buffer of n bytes, reused from an earlier
// cycle when one is large enough: a cycle packs megabytes, and fresh
// buffers each time kept the garbage collector busy (a third of the
// CPU time of 4 KiB interleaved writes went to clearing and returning
// them). The cycle's buffers go back with unpack once its requests are
// all complete.
func (p *plan) pack(n int64) []byte {
	f := p.f
	for i, b := range f.packs {
		if int64(cap(b)) >= n {
			f.packs = slices.Delete(f.packs, i, i+1)
			p.used = append(p.used, b)
			return b[:n]
		}
	}
	b := make([]byte, n)
	p.used = append(p.used, b)
	return b
}

// unpack gives the cycle's packing buffers back. After ctx ended a
// wait, a request may still use its buffer: those are left to the
// garbage collector.
func (p *plan) unpack(ctx context.Context) {
	if ctx.Err() == nil {
		f := p.f
		f.packs = append(f.packs, p.used...)
		// A cycle uses at most two per member (a send and a receive):
		// keep the largest that many, so that calls of growing pieces do
		// not pile up small ones.
		if keep := 2 * f.n; len(f.packs) > keep {
			slices.SortFunc(f.packs, func(a, b []byte) int { return cap(b) - cap(a) })
			clear(f.packs[keep:])
			f.packs = f.packs[:keep]
		}
	}
	clear(p.used)
	p.used = p.used[:0]
}

// user is piece q's bytes in the caller's buffer.
func (p *plan) user(q run) []byte { return p.buf[q.buf : q.buf+q.n] }

// inWindow returns piece q's bytes in an aggregator buffer cb holding the
// file from wlo on.
func inWindow(cb []byte, wlo int64) func(run) []byte {
	return func(q run) []byte { return cb[q.file-wlo : q.file-wlo+q.n] }
}

// isend and irecv post a message of the exchange on x; one that cannot
// start fails x.
func (p *plan) isend(x *xfer, b []byte, dest int) {
	q, err := p.f.comm.Isend(b, dest, p.tag)
	x.add(q, err)
}

func (p *plan) irecv(x *xfer, b []byte, src int) {
	q, err := p.f.comm.Irecv(b, src, p.tag)
	x.add(q, err)
}

func (x *xfer) add(q fabric.Request, err error) {
	if err != nil {
		if x.err == nil {
			x.err = err
		}
		return
	}
	x.reqs = append(x.reqs, q)
}

// wait waits for each of x's requests and returns the first error.
func (x *xfer) wait(ctx context.Context) error {
	first := x.err
	for i := range x.reqs {
		if _, err := x.reqs[i].Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
