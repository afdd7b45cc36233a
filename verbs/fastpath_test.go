package verbs

import (
	"encoding/binary"
	"os"
	"testing"
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
	sq.InitProducer()
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
	qp := &QP{pd: pd, sendCQ: cq, recvCQ: cq, sq: sq, bell: uverbs.DoorbellOnFD(int(null.Fd())),
		state: QPRTS, maxSendSGE: 1, maxInline: 64, maxMsg: 1 << 23, maxRecvSGE: 1}
	return qp, cq, mr, sqBuf, cqBuf
}

// BenchmarkFastPathUserSpace posts an atomic, plays the kernel (consume the
// WQE, write a completion), and polls it: everything Rivet does per
// operation except the kernel's own work.
func BenchmarkFastPathUserSpace(b *testing.B) {
	qp, cq, mr, sqBuf, cqBuf := fakeQP(b)
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
}

// BenchmarkDoorbellOnly is the syscall alone, to subtract from
// BenchmarkFastPathUserSpace.
func BenchmarkDoorbellOnly(b *testing.B) {
	qp, _, _, _, _ := fakeQP(b)
	for b.Loop() {
		qp.bell.Ring()
	}
}
