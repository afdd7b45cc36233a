//go:build linux

package files

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

// progPointers: the individual file pointer with Seek, the shared one
// with independent and ordered access.
func progPointers(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	n, me := c.Size(), c.Rank()
	f, err := Open(ctx, c, filepath.Join(dir(), "pointers"), ModeCreate|ModeRdWr, Hints{})
	must(err, "open")
	defer f.Close(ctx)
	// Individual pointers, each rank in its own block of a cyclic view.
	ft, err := BlockCyclic(4, int64(n), int64(me))
	must(err, "filetype")
	must(f.SetView(ctx, 0, 2, ft), "view")
	rec := func(r, k int) []byte { return []byte(fmt.Sprintf("%d%07d", r, k)) } // 8 bytes: 4 etypes
	for k := range 3 {
		if _, err := f.Write(rec(me, k)); err != nil {
			failf("write %d: %v", k, err)
		}
	}
	if pos := f.Position(); pos != 12 {
		failf("after three writes of 4 etypes: position %d", pos)
	}
	if _, err := f.Seek(-8, io.SeekCurrent); err != nil {
		failf("seek: %v", err)
	}
	b := make([]byte, 8)
	if _, err := f.Read(b); err != nil || !bytes.Equal(b, rec(me, 1)) {
		failf("read after seek: %q %v", b, err)
	}
	must(f.Sync(ctx), "sync")
	if end, err := f.Seek(0, io.SeekEnd); err != nil || end != 12 {
		failf("seek to the end: %d %v", end, err)
	}
	if _, err := f.Seek(-1, io.SeekStart); !errors.Is(err, fabric.ErrInvalid) {
		failf("seek before the start: %v", err)
	}
	if off := f.ByteOffset(5); off != int64(2*(n*4+me*4+1)) {
		failf("ByteOffset(5) = %d", off)
	}

	// The shared pointer: a log of records from every rank, none lost or
	// overlapping.
	must(f.SetView(ctx, 0, 8, Contiguous()), "log view")
	const k = 20
	for i := range k {
		if i%2 == 0 {
			if _, err := f.WriteShared(ctx, rec(me, i)); err != nil {
				failf("WriteShared: %v", err)
			}
			continue
		}
		q, err := f.IWriteShared(ctx, rec(me, i))
		must(err, "IWriteShared")
		if _, err := q.Wait(ctx); err != nil {
			failf("IWriteShared: %v", err)
		}
	}
	must(f.Sync(ctx), "sync log")
	if pos, err := f.PositionShared(ctx); err != nil || pos != int64(n*k) {
		failf("shared pointer after %d records: %d %v", n*k, pos, err)
	}
	all := make([]byte, 8*n*k)
	if _, err := f.ReadAt(0, all); err != nil {
		failf("read log: %v", err)
	}
	var got []string
	for i := range n * k {
		got = append(got, string(all[8*i:8*i+8]))
	}
	slices.Sort(got)
	var want []string
	for r := range n {
		for i := range k {
			want = append(want, string(rec(r, i)))
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		failf("shared-pointer log: %q, want %q", got, want)
	}
	must(collectives.Barrier(ctx, c), "barrier")
	// Ordered: rank order, after the log; a rank writes r+1 records.
	mine := bytes.Repeat(rec(me, 99), me+1)
	if _, err := f.WriteOrdered(ctx, mine); err != nil {
		failf("WriteOrdered: %v", err)
	}
	must(f.Sync(ctx), "sync ordered")
	if _, err := f.SeekShared(ctx, int64(n*k), io.SeekStart); err != nil {
		failf("SeekShared: %v", err)
	}
	back := make([]byte, len(mine))
	if _, err := f.ReadOrdered(ctx, back); err != nil || !bytes.Equal(back, mine) {
		failf("ReadOrdered: %q %v, want %q", back, err, mine)
	}
	if pos, err := f.SeekShared(ctx, 0, io.SeekCurrent); err != nil || pos != int64(n*k+n*(n+1)/2) {
		failf("shared pointer after the ordered records: %d %v", pos, err)
	}
	// A member's invalid arguments (not whole etypes) fail the ordered
	// write at every member; none is left waiting in it, and the shared
	// pointer does not move.
	bad := rec(me, 100)
	if me == n-1 {
		bad = bad[:5]
	}
	if _, err := f.WriteOrdered(ctx, bad); !errors.Is(err, fabric.ErrInvalid) {
		failf("WriteOrdered with rank %d's invalid buffer: %v", n-1, err)
	}
	if pos, err := f.SeekShared(ctx, 0, io.SeekCurrent); err != nil || pos != int64(n*k+n*(n+1)/2) {
		failf("shared pointer after the refused ordered write: %d %v", pos, err)
	}
	return nil
}

// progNonblocking: independent and collective accesses in flight
// together, completed in another order than started.
func progNonblocking(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	n, me := c.Size(), c.Rank()
	f, err := Open(ctx, c, filepath.Join(dir(), "nb"), ModeCreate|ModeRdWr, Hints{Buffering: BufferingOn, BufferSize: 4096})
	must(err, "open")
	defer f.Close(ctx)
	ft, _ := BlockCyclic(1, int64(n), int64(me))
	must(f.SetView(ctx, 0, 8, ft), "view")
	const k = 3000
	bufs := make([][]byte, 3)
	var reqs []*Request
	for j := range bufs {
		bufs[j] = make([]byte, 8*k)
		for i := range k {
			binary.LittleEndian.PutUint64(bufs[j][8*i:], value(me, j*k+i))
		}
		q, err := f.IWriteAtAll(int64(j*k), bufs[j])
		must(err, "IWriteAtAll")
		reqs = append(reqs, q)
	}
	one := make([]byte, 8)
	binary.LittleEndian.PutUint64(one, value(me, 3*k))
	qi, err := f.IWriteAt(3*k, one)
	must(err, "IWriteAt")
	reqs = append(reqs, qi)
	for j := len(reqs) - 1; j >= 0; j-- {
		if _, err := reqs[j].Wait(ctx); err != nil {
			failf("wait %d: %v", j, err)
		}
	}
	// With the individual pointer, past the collective writes.
	if _, err := f.Seek(3*k+1, io.SeekStart); err != nil {
		failf("seek: %v", err)
	}
	tail := make([]byte, 8)
	binary.LittleEndian.PutUint64(tail, value(me, 3*k+1))
	qa, err := f.IWriteAll(tail)
	must(err, "IWriteAll")
	if _, err := qa.Wait(ctx); err != nil {
		failf("IWriteAll: %v", err)
	}
	must(f.Sync(ctx), "sync")
	back := make([]byte, 8*(3*k+2))
	q, err := f.IReadAtAll(0, back)
	must(err, "IReadAtAll")
	for {
		done, got, err := q.Test()
		if done {
			if err != nil || got != len(back) {
				failf("IReadAtAll: %d %v", got, err)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i, v := range elems(back) {
		if v != value(me, i) {
			failf("element %d: %#x, want %#x", i, v, value(me, i))
		}
	}
	return nil
}

// progRevoke: rank 1 revokes the file while rank 0 waits in a
// collective write that rank 1 never joins: rank 0's call raises
// ErrRevoked, every rank sees the handle revoked, collective calls raise
// at once, independent ones still work, Close releases the handle.
func progRevoke(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me := c.Rank()
	f, err := Open(ctx, c, filepath.Join(dir(), "revoke"), ModeCreate|ModeRdWr|ModeDeleteOnClose, Hints{Buffering: BufferingOn})
	must(err, "open")
	buf := make([]byte, 64)
	switch me {
	case 0:
		_, err := f.WriteAtAll(ctx, 0, buf)
		wantErr(err, fabric.ErrRevoked, "the collective write a revoke interrupts")
	case 1:
		must(f.Revoke(), "revoke") // rank 0 waits in WriteAtAll, which rank 1 never joins
		must(c.Send(ctx, nil, 2, 0), "go")
	default:
		_, err := c.Recv(ctx, nil, 1, 0)
		must(err, "go")
	}
	for !f.IsRevoked() {
		if ctx.Err() != nil {
			failf("the revoke never arrived")
		}
		ep.Poll() // (IsRevoked makes no progress; a detector would)
		time.Sleep(time.Millisecond)
	}
	_, err = f.WriteAtAll(ctx, 0, buf)
	wantErr(err, fabric.ErrRevoked, "a collective write after the revoke")
	_, err = f.WriteOrdered(ctx, buf)
	wantErr(err, fabric.ErrRevoked, "an ordered write after the revoke")
	_, err = f.WriteShared(ctx, buf)
	wantErr(err, fabric.ErrRevoked, "a shared write after the revoke")
	wantErr(f.Sync(ctx), fabric.ErrRevoked, "Sync after the revoke")
	if _, err := f.WriteAt(int64(64*me), buf); err != nil {
		failf("an independent write after the revoke: %v", err)
	}
	wantErr(f.Close(ctx), fabric.ErrRevoked, "close")
	_, err = f.WriteAt(0, buf)
	wantErr(err, ErrClosed, "write after close")
	return nil
}
