//go:build linux

package verbs

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rivet-hpc/rivet/internal/rxe"
	"github.com/rivet-hpc/rivet/internal/uverbs"
)

// fakeRing is a ring laid out as the kernel lays it out.
func fakeRing(t testing.TB, slots, log2 uint32) []byte {
	buf := make([]byte, 384+int(slots<<log2))
	binary.NativeEndian.PutUint32(buf[0:], log2)
	binary.NativeEndian.PutUint32(buf[4:], slots-1)
	return buf
}

// fakeQP is a connected QP and its CQ over in-memory rings, with the
// doorbell writing to /dev/null: the user-space half of post and poll,
// measurable on any machine.
func fakeQP(t testing.TB) (*QP, *CQ, *MR, []byte, []byte) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	sqBuf, cqBuf := fakeRing(t, 8, 8), fakeRing(t, 8, 7)
	sq, _ := rxe.NewQueue(sqBuf)
	cqRing, _ := rxe.NewQueue(cqBuf)
	rq, _ := rxe.NewQueue(fakeRing(t, 8, 7))
	sq.InitProducer()
	rq.InitProducer()
	cqRing.InitConsumer()
	mem, err := AllocMemory(4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.release(); mem.Close() })
	mem.acquire()
	pd := &PD{lifetime: lifetime{kind: "PD"}}
	mr := &MR{pd: pd, mem: mem, addr: uint64(uintptr(unsafe.Pointer(&mem.b[0]))), length: 4096, access: AccessAll, lkey: 1}
	cq := &CQ{ring: cqRing, lifetime: lifetime{kind: "CQ"}}
	qp := &QP{pd: pd, sendCQ: cq, recvCQ: cq, sq: sq, rq: rq, bell: uverbs.DoorbellOnFD(int(null.Fd())),
		state: QPRTS, maxSendSGE: 1, maxInline: 64, maxMsg: 1 << 23, maxRecvSGE: 2}
	return qp, cq, mr, sqBuf, cqBuf
}

// BenchmarkFastPathUserSpace posts an atomic, plays the kernel (consume the
// WQE, write a completion), and polls it: everything Rivet does per
// operation except the kernel's own work. "unlocked" is the same with
// QPConfig.Unlocked and CQConfig.Unlocked.
func BenchmarkFastPathUserSpace(b *testing.B) {
	for _, unlocked := range []bool{false, true} {
		b.Run(map[bool]string{false: "locked", true: "unlocked"}[unlocked], func(b *testing.B) {
			qp, cq, mr, sqBuf, cqBuf := fakeQP(b)
			qp.unlocked, cq.unlocked = unlocked, unlocked
			wr := SendWR{Op: OpFetchAdd, Flags: Signaled, Local: []SGE{{MR: mr, Length: 8}}, Remote: RemoteBuf{Addr: 64, RKey: 2}, CompareAdd: 1}
			wcs := make([]WorkCompletion, 1)
			b.ReportAllocs()
			var i uint32
			for b.Loop() {
				if err := qp.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				i++
				binary.NativeEndian.PutUint32(sqBuf[256:], i&7) // the kernel consumed the WQE
				binary.NativeEndian.PutUint32(cqBuf[128:], i&7) // and produced a completion
				if n, err := cq.Poll(wcs); n != 1 || err != nil {
					b.Fatalf("poll: %d, %v", n, err)
				}
			}
		})
	}
}

// TestUnlockedTakesNoLock: with Unlocked, posts and polls go ahead while
// their locks are held elsewhere; without it, they wait for them.
func TestUnlockedTakesNoLock(t *testing.T) {
	for _, unlocked := range []bool{false, true} {
		qp, cq, mr, _, _ := fakeQP(t)
		qp.unlocked, cq.unlocked = unlocked, unlocked
		qp.sqMu.Lock()
		qp.rqMu.Lock()
		cq.mu.Lock()
		done := make(chan error, 1)
		go func() {
			wcs := make([]WorkCompletion, 1)
			_, err := cq.Poll(wcs)
			done <- errors.Join(err,
				qp.PostSend(SendWR{Op: OpSend, Local: []SGE{{MR: mr, Length: 8}}}),
				qp.PostSendInline(1, 0, []byte("head"), []byte("tail")),
				qp.PostRecv(RecvWR{Local: []SGE{{MR: mr, Length: 8}}}))
		}()
		select {
		case err := <-done:
			if !unlocked {
				t.Fatalf("locked: the calls went ahead while their locks were held (%v)", err)
			}
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(map[bool]time.Duration{false: 100 * time.Millisecond, true: 10 * time.Second}[unlocked]):
			if unlocked {
				t.Fatal("unlocked: the calls waited for locks they should not take")
			}
		}
		cq.mu.Unlock()
		qp.rqMu.Unlock()
		qp.sqMu.Unlock()
		if !unlocked {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if n := qp.SendQueued(); n != 2 {
			t.Errorf("unlocked %v: %d sends posted, want 2", unlocked, n)
		}
		if n := qp.rq.Outstanding(); n != 1 {
			t.Errorf("unlocked %v: %d receives posted, want 1", unlocked, n)
		}
	}
}

// BenchmarkDoorbellOnly is the syscall alone, to subtract from
// BenchmarkFastPathUserSpace.
func BenchmarkDoorbellOnly(b *testing.B) {
	qp, _, _, _, _ := fakeQP(b)
	for b.Loop() {
		qp.bell.Ring()
	}
}

// TestPostRecvBatch: a batch of receives into one region is written as
// posted, and a bad SGE anywhere in it — the region checked once, the
// bounds of every SGE — refuses the whole batch.
func TestPostRecvBatch(t *testing.T) {
	qp, _, mr, _, _ := fakeQP(t)
	wrs := []RecvWR{
		{ID: 7, Local: []SGE{{MR: mr, Offset: 0, Length: 64}}},
		{ID: 8, Local: []SGE{{MR: mr, Offset: 64, Length: 64}, {MR: mr, Offset: 1024, Length: 32}}},
		{ID: 9, Local: []SGE{{MR: mr, Offset: 4095, Length: 1}}},
	}
	bad := append(wrs[:2:2], RecvWR{ID: 10, Local: []SGE{{MR: mr, Length: 8}, {MR: mr, Offset: 4090, Length: 8}}})
	if err := qp.PostRecv(bad...); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "outside its") {
		t.Fatalf("batch with an SGE past its region: %v", err)
	}
	if n := qp.rq.Outstanding(); n != 0 {
		t.Fatalf("%d receives of a refused batch posted", n)
	}
	if err := qp.PostRecv(wrs...); err != nil {
		t.Fatal(err)
	}
	if n := qp.rq.Outstanding(); n != 3 {
		t.Fatalf("%d receives posted, want 3", n)
	}
	for i, wr := range wrs {
		slot := qp.rq.NextSlot(uint32(i) - 3)
		h := (*rxe.RecvWQEHeader)(slot)
		sges := unsafe.Slice((*rxe.SGE)(unsafe.Add(slot, rxe.RecvWQEHeaderSize)), len(wr.Local))
		var total uint32
		for j, s := range wr.Local {
			if want := (rxe.SGE{Addr: mr.addr + s.Offset, Length: s.Length, LKey: mr.lkey}); sges[j] != want {
				t.Errorf("receive %d, SGE %d: %+v, want %+v", i, j, sges[j], want)
			}
			total += s.Length
		}
		if h.WRID != wr.ID || h.DMA.Length != total || h.DMA.Resid != total || h.DMA.NumSGE != uint32(len(wr.Local)) {
			t.Errorf("receive %d: %+v", i, *h)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		qp.rq.Publish(^uint32(2)) // take the three back
		if err := qp.PostRecv(wrs...); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("PostRecv allocates %v times a batch", n)
	}
}
