// Package rxe is the user-space half of the soft-RoCE (rdma_rxe) provider:
// the shared rings the kernel maps into the process and the layout of the
// work requests written into them (include/uapi/rdma/rdma_user_rxe.h,
// drivers/infiniband/sw/rxe/rxe_queue.h, Linux 6.1).
package rxe

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Queue header offsets (struct rxe_queue_buf): the two indices sit on their
// own cache lines; slots start at 384.
const (
	hdrLog2ElemSize  = 0
	hdrIndexMask     = 4
	hdrProducerIndex = 128
	hdrConsumerIndex = 256
	hdrSize          = 384
)

// Queue is one mapped ring. For a send or receive queue user space is the
// producer and the kernel the consumer; for a completion queue it is the
// other way round. Indices are stored masked; the queue is empty when they
// are equal and full when producer+1 == consumer (one slot stays unused).
//
// A Queue is not safe for concurrent use; its owner locks.
type Queue struct {
	buf   []byte
	data  unsafe.Pointer
	mask  uint32
	log2  uint32
	prod  *uint32 // shared
	cons  *uint32 // shared
	local uint32  // our side's index: producer for SQ/RQ, consumer for CQ
}

// NewQueue wraps a ring mapped from the uverbs fd, checking that the header
// describes a ring that fits in the mapping.
func NewQueue(buf []byte) (*Queue, error) {
	if len(buf) < hdrSize {
		return nil, fmt.Errorf("rxe ring: mapping of %d bytes is smaller than its header", len(buf))
	}
	log2 := binary.NativeEndian.Uint32(buf[hdrLog2ElemSize:])
	mask := binary.NativeEndian.Uint32(buf[hdrIndexMask:])
	if log2 > 16 || mask&(mask+1) != 0 || hdrSize+(uint64(mask)+1)<<log2 > uint64(len(buf)) {
		return nil, fmt.Errorf("rxe ring: header (log2 elem %d, mask %#x) does not fit %d bytes", log2, mask, len(buf))
	}
	q := &Queue{
		buf:  buf,
		data: unsafe.Pointer(&buf[hdrSize]),
		mask: mask,
		log2: log2,
		prod: (*uint32)(unsafe.Pointer(&buf[hdrProducerIndex])),
		cons: (*uint32)(unsafe.Pointer(&buf[hdrConsumerIndex])),
	}
	return q, nil
}

// Capacity is how many elements the ring holds at once.
func (q *Queue) Capacity() uint32 { return q.mask }

// ElemSize is the size of one slot in bytes.
func (q *Queue) ElemSize() uint32 { return 1 << q.log2 }

// Bytes returns the mapping, for unmapping.
func (q *Queue) Bytes() []byte { return q.buf }

func (q *Queue) slot(i uint32) unsafe.Pointer {
	return unsafe.Add(q.data, uintptr(i&q.mask)<<q.log2)
}

// Producer side (send and receive queues).

// InitProducer takes the producer index from the header.
func (q *Queue) InitProducer() { q.local = atomic.LoadUint32(q.prod) & q.mask }

// Free is how many slots can be filled now. The kernel's consumer index is
// read with acquire semantics: a slot it has passed is ours again.
func (q *Queue) Free() uint32 {
	cons := atomic.LoadUint32(q.cons) & q.mask
	return q.mask - ((q.local - cons) & q.mask)
}

// Outstanding is how many published slots the kernel has not consumed.
func (q *Queue) Outstanding() uint32 {
	return (q.local - atomic.LoadUint32(q.cons)) & q.mask
}

// NextSlot returns the n-th unpublished slot after the producer index.
func (q *Queue) NextSlot(n uint32) unsafe.Pointer { return q.slot(q.local + n) }

// Publish makes n filled slots visible to the kernel (store-release).
func (q *Queue) Publish(n uint32) {
	q.local = (q.local + n) & q.mask
	storeRelease(q.prod, q.local)
}

// Consumer side (completion queues).

// InitConsumer takes the consumer index from the header.
func (q *Queue) InitConsumer() { q.local = atomic.LoadUint32(q.cons) & q.mask }

// Peek returns the oldest unconsumed slot, or nil if the ring is empty.
// The kernel's producer index is read with acquire semantics, so the slot's
// contents are visible.
func (q *Queue) Peek() unsafe.Pointer {
	if atomic.LoadUint32(q.prod)&q.mask == q.local {
		return nil
	}
	return q.slot(q.local)
}

// Consume hands the oldest slot back to the kernel (store-release).
func (q *Queue) Consume() {
	q.local = (q.local + 1) & q.mask
	storeRelease(q.cons, q.local)
}
