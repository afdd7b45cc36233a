//go:build linux

package verbs

import (
	"bytes"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/rivet-hpc/rivet/internal/rxe"
)

// TestPostSendInlineWQE checks the work request PostSendInline writes, on
// in-memory rings: the same header a one-SGE inline send gets, head and
// tail back to back, and no allocation.
func TestPostSendInlineWQE(t *testing.T) {
	qp, _, _, sqBuf, _ := fakeQP(t)
	qp.maxInline = 256 - rxe.SendWQEHeaderSize // the fake ring's slots are 256 bytes
	head, tail := []byte("header:"), []byte("payload")
	if err := qp.PostSendInline(42, Signaled, head, tail); err != nil {
		t.Fatal(err)
	}
	slot := sqBuf[384 : 384+256]
	h := (*rxe.SendWQEHeader)(unsafe.Pointer(&slot[0]))
	n := uint32(len(head) + len(tail))
	if h.WRID != 42 || h.Opcode != uint32(OpSend) || h.SendFlags != uint32(Signaled|Inline) ||
		h.DMA.Length != n || h.DMA.Resid != n || h.DMA.NumSGE != 1 || h.SSN != 1 {
		t.Errorf("WQE header %+v", *h)
	}
	if got := slot[rxe.SendWQEHeaderSize : rxe.SendWQEHeaderSize+int(n)]; string(got) != "header:payload" {
		t.Errorf("inline data %q", got)
	}
	// Empty: no SGE, as an empty send from a registered buffer has none.
	if err := qp.PostSendInline(43, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	h = (*rxe.SendWQEHeader)(unsafe.Pointer(&sqBuf[384+256]))
	if h.WRID != 43 || h.DMA.Length != 0 || h.DMA.NumSGE != 0 || h.SendFlags != uint32(Inline) {
		t.Errorf("empty send's WQE header %+v", *h)
	}
	// Word and byte stores, on both sides of the seam, and nothing written
	// past the data (slots 2 to 5 of the eight).
	for i, c := range [][2]int{{20, 8}, {0, 13}, {17, 0}, {1, 1}} {
		slot := sqBuf[384+(2+i)*256 : 384+(3+i)*256]
		for k := range slot {
			slot[k] = 0xaa
		}
		head, tail := make([]byte, c[0]), make([]byte, c[1])
		fill(head, 1)
		fill(tail, 2)
		if err := qp.PostSendInline(50, 0, head, tail); err != nil {
			t.Fatal(err)
		}
		data := slot[rxe.SendWQEHeaderSize:]
		if want := append(head, tail...); string(data[:len(want)]) != string(want) || data[len(want)] != 0xaa {
			t.Errorf("%d+%d bytes: inline data % x, want % x then aa", c[0], c[1], data[:len(want)+1], want)
		}
	}
	// With immediate data: a send-with-immediate's opcode, and the data
	// big-endian, as rxe puts it on the wire (slot 6).
	if err := qp.PostSendInlineImm(45, Signaled, 0x01020304, head, tail); err != nil {
		t.Fatal(err)
	}
	h = (*rxe.SendWQEHeader)(unsafe.Pointer(&sqBuf[384+6*256]))
	if h.WRID != 45 || h.Opcode != uint32(OpSendWithImm) || h.ImmData != beUint32(0x01020304) ||
		h.SendFlags != uint32(Signaled|Inline) || h.DMA.Length != uint32(len(head)+len(tail)) {
		t.Errorf("send-with-immediate's WQE header %+v", *h)
	}
	*(*uint32)(unsafe.Pointer(&sqBuf[256])) = 7 // all seven consumed
	// The kernel consumes what is posted, so the ring never fills.
	var consumed uint32 = 7
	allocs := testing.AllocsPerRun(100, func() {
		if err := qp.PostSendInline(44, 0, head, tail); err != nil {
			t.Fatal(err)
		}
		consumed++
		*(*uint32)(unsafe.Pointer(&sqBuf[256])) = consumed & 7
	})
	if allocs != 0 {
		t.Errorf("PostSendInline allocates %v times per call", allocs)
	}
	allocs = testing.AllocsPerRun(100, func() {
		if err := qp.PostSendInlineImm(46, 0, 7, head, tail); err != nil {
			t.Fatal(err)
		}
		consumed++
		*(*uint32)(unsafe.Pointer(&sqBuf[256])) = consumed & 7
	})
	if allocs != 0 {
		t.Errorf("PostSendInlineImm allocates %v times per call", allocs)
	}
}

func TestPostSendInlineErrors(t *testing.T) {
	qp, _, _, _, _ := fakeQP(t)
	qp.maxInline = 32
	big := make([]byte, 20)
	for _, c := range []struct {
		name       string
		flags      SendFlags
		head, tail []byte
		state      QPState
		closed     bool
		want       error
	}{
		{"too long", 0, big, big, QPRTS, false, ErrInvalid},
		{"bad flags", SendFlags(1 << 20), nil, nil, QPRTS, false, ErrInvalid},
		{"not ready", 0, nil, nil, QPInit, false, ErrState},
		{"closed", 0, nil, nil, QPRTS, true, ErrClosed},
	} {
		t.Run(c.name, func(t *testing.T) {
			qp.state, qp.closed = c.state, c.closed
			err := qp.PostSendInline(1, c.flags, c.head, c.tail)
			if !errors.Is(err, c.want) {
				t.Errorf("got %v, want %v", err, c.want)
			}
		})
	}
	// A full send queue: nothing consumes the fake ring's 8 slots.
	qp.state, qp.closed = QPRTS, false
	var err error
	for i := 0; i < 9 && err == nil; i++ {
		err = qp.PostSendInline(uint64(i), 0, big[:4], nil)
	}
	if !errors.Is(err, ErrQueueFull) {
		t.Errorf("posting past a full queue: %v", err)
	}
}

// TestPostSendInlineData sends with PostSendInline over rxe, signaled and
// not, and checks what arrives byte for byte: memory that is not
// registered (Go's heap) goes inline.
func TestPostSendInlineData(t *testing.T) {
	for _, p := range devicePairs(t) {
		t.Run(p[0]+"-"+p[1], func(t *testing.T) {
			a, b := connectPair(t, p[0], p[1], sideConfig{QPConfig: QPConfig{MaxInline: 256}})
			dst := b.mr.Bytes()
			for i, c := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {20, 8}, {7, 100}, {100, 156}} {
				head, tail := make([]byte, c[0]), make([]byte, c[1])
				fill(head, uint64(i))
				fill(tail, uint64(i)+100)
				off := uint64(i * 512)
				if err := b.qp.PostRecv(RecvWR{ID: uint64(i), Local: []SGE{{MR: b.mr, Offset: off, Length: 512}}}); err != nil {
					t.Fatal(err)
				}
				flags := Signaled
				if i%2 == 1 {
					flags = 0 // unsignaled: only the receive says it arrived
				}
				if err := a.qp.PostSendInline(uint64(100+i), flags, head, tail); err != nil {
					t.Fatal(err)
				}
				if flags == Signaled {
					wc := waitWC(t, a.scq, 1, 10*time.Second)
					mustOK(t, wc)
					if wc[0].ID != uint64(100+i) || wc[0].Opcode != WCSend {
						t.Errorf("%v: send completion %+v", c, wc[0])
					}
				}
				wc := waitWC(t, b.rcq, 1, 10*time.Second)
				mustOK(t, wc)
				n := c[0] + c[1]
				if wc[0].ID != uint64(i) || wc[0].ByteLen != uint32(n) {
					t.Errorf("%v: receive completion %+v", c, wc[0])
				}
				if got, want := dst[off:off+uint64(n)], append(head, tail...); !bytes.Equal(got, want) {
					t.Errorf("%v: received %x, want %x", c, got, want)
				}
			}
			over := make([]byte, a.qp.maxInline+1)
			if err := a.qp.PostSendInline(1, 0, over, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("%d bytes inline: %v", len(over), err)
			}
		})
	}
}
