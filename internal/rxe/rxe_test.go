package rxe

import (
	"encoding/binary"
	"testing"
	"unsafe"
)

// TestLayouts pins the structs to pahole's sizes and offsets for
// rdma_user_rxe.h (internal/uverbs/testdata/verbs-abi-layouts.txt).
func TestLayouts(t *testing.T) {
	var w SendWQEHeader
	var r RecvWQEHeader
	for name, c := range map[string][2]uintptr{
		"sizeof rxe_send_wqe":    {unsafe.Sizeof(w), 208},
		"sizeof rxe_recv_wqe":    {unsafe.Sizeof(r), 40},
		"sizeof rxe_dma_info":    {unsafe.Sizeof(DMAInfo{}), 24},
		"sizeof rxe_sge":         {unsafe.Sizeof(SGE{}), 16},
		"wr.opcode":              {unsafe.Offsetof(w.Opcode), 12},
		"wr.ex.imm_data":         {unsafe.Offsetof(w.ImmData), 20},
		"wr.wr.rdma.remote_addr": {unsafe.Offsetof(w.RemoteAddr), 24},
		"wr.wr.rdma.rkey":        {unsafe.Offsetof(w.RKeyOrCmp), 32},
		"wr.wr.atomic.swap":      {unsafe.Offsetof(w.Swap), 40},
		"wr.wr.atomic.rkey":      {unsafe.Offsetof(w.AtomicRKey), 48},
		"status":                 {unsafe.Offsetof(w.Status), 144},
		"iova":                   {unsafe.Offsetof(w.IOVA), 152},
		"dma":                    {unsafe.Offsetof(w.DMA), 184},
		"recv dma":               {unsafe.Offsetof(r.DMA), 16},
	} {
		if c[0] != c[1] {
			t.Errorf("%s = %d, want %d", name, c[0], c[1])
		}
	}
}

// fakeRing builds a ring header as the kernel lays it out.
func fakeRing(slots, elem uint32) []byte {
	buf := make([]byte, hdrSize+int(slots*elem))
	log2 := uint32(0)
	for 1<<log2 < elem {
		log2++
	}
	binary.NativeEndian.PutUint32(buf[hdrLog2ElemSize:], log2)
	binary.NativeEndian.PutUint32(buf[hdrIndexMask:], slots-1)
	return buf
}

func TestQueueProducer(t *testing.T) {
	buf := fakeRing(8, 64)
	q, err := NewQueue(buf)
	if err != nil {
		t.Fatal(err)
	}
	q.InitProducer()
	if q.Capacity() != 7 || q.Free() != 7 || q.ElemSize() != 64 {
		t.Fatalf("capacity %d free %d elem %d", q.Capacity(), q.Free(), q.ElemSize())
	}
	// Wrap the ring many times, the kernel consuming behind us.
	for i := 0; i < 100; i++ {
		*(*uint64)(q.NextSlot(0)) = uint64(i)
		q.Publish(1)
		prod := binary.NativeEndian.Uint32(buf[hdrProducerIndex:])
		slot := (prod - 1) & 7
		if got := binary.NativeEndian.Uint64(buf[hdrSize+int(slot)*64:]); got != uint64(i) {
			t.Fatalf("slot %d holds %d, want %d", slot, got, i)
		}
		if q.Free() != 6 || q.Outstanding() != 1 {
			t.Fatalf("free %d outstanding %d", q.Free(), q.Outstanding())
		}
		binary.NativeEndian.PutUint32(buf[hdrConsumerIndex:], prod) // kernel consumed it
	}
	q.Publish(7)
	if q.Free() != 0 {
		t.Errorf("full ring has %d free", q.Free())
	}
}

func TestQueueConsumer(t *testing.T) {
	buf := fakeRing(4, 128)
	q, _ := NewQueue(buf)
	q.InitConsumer()
	if q.Peek() != nil {
		t.Fatal("empty ring returned a slot")
	}
	for i := uint32(0); i < 10; i++ {
		slot := i & 3
		binary.NativeEndian.PutUint64(buf[hdrSize+int(slot)*128:], uint64(i))
		binary.NativeEndian.PutUint32(buf[hdrProducerIndex:], (i+1)&3)
		p := q.Peek()
		if p == nil || *(*uint64)(p) != uint64(i) {
			t.Fatalf("peek %d", i)
		}
		q.Consume()
		if got := binary.NativeEndian.Uint32(buf[hdrConsumerIndex:]); got != (i+1)&3 {
			t.Fatalf("consumer index %d", got)
		}
		if q.Peek() != nil {
			t.Fatal("consumed slot returned again")
		}
	}
}

func TestQueueRejectsBadHeader(t *testing.T) {
	if _, err := NewQueue(make([]byte, 100)); err == nil {
		t.Error("short mapping accepted")
	}
	buf := fakeRing(8, 64)
	binary.NativeEndian.PutUint32(buf[hdrIndexMask:], 15) // claims 16 slots
	if _, err := NewQueue(buf); err == nil {
		t.Error("oversized ring accepted")
	}
	binary.NativeEndian.PutUint32(buf[hdrIndexMask:], 6) // not 2^n-1
	if _, err := NewQueue(buf); err == nil {
		t.Error("non power-of-two mask accepted")
	}
}
