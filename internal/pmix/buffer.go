package pmix

import (
	"errors"
	"fmt"
	"math"
)

// ErrProtocol is wrapped by every error about what the server sent: a
// message that does not decode, a type this client does not know, a
// handshake that is not openpmix's.
var ErrProtocol = errors.New("pmix: protocol error")

// maxCount bounds the element counts a message may claim, so that a
// corrupt count fails instead of allocating without end (a job's largest
// array, its per-process blobs, has one entry a process).
const maxCount = 1 << 24

// encoder packs values as an openpmix v4 client does into a
// non-self-describing buffer: no type tags before values whose type both
// sides know, integers in flex128.
type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)        { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64)  { e.b = appendUvarint(e.b, v) }
func (e *encoder) varint(v int64)    { e.b = appendVarint(e.b, v) }
func (e *encoder) dataType(t uint16) { e.uvarint(uint64(t)) }

// str packs a string: its length with the terminating NUL, then its bytes
// and the NUL.
func (e *encoder) str(s string) {
	e.varint(int64(len(s)) + 1)
	e.b = append(e.b, s...)
	e.b = append(e.b, 0)
}

// bytes packs a byte object: its length, then its bytes.
func (e *encoder) bytes(p []byte) {
	e.uvarint(uint64(len(p)))
	e.b = append(e.b, p...)
}

func (e *encoder) proc(nspace string, rank uint32) {
	e.str(nspace)
	e.uvarint(uint64(rank))
}

// newRequest starts a request's payload: its command, a top-level pack of
// one byte.
func newRequest(cmd byte) *encoder {
	e := &encoder{}
	e.count(1)
	e.u8(cmd)
	return e
}

// count opens a top-level pack (PMIx_Data_pack, the server's
// PMIX_BFROPS_PACK): the number of values that follow, as an int32.
func (e *encoder) count(n int) { e.varint(int64(n)) }

// decoder unpacks what an encoder packed. Its first error sticks: every
// later read returns zero values, so a caller checks err once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) empty() bool { return d.err == nil && len(d.b) == 0 }

func (d *decoder) u8() uint8 {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("message ends inside a value")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := uvarint(d.b)
	if n == 0 {
		d.fail("message ends inside an integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 { return unfold(d.uvarint()) }

// uint32 reads an unsigned integer that must fit 32 bits.
func (d *decoder) uint32() uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.fail("%d does not fit 32 bits", v)
		return 0
	}
	return uint32(v)
}

// int32 reads a signed integer that must fit 32 bits.
func (d *decoder) int32() int32 {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("%d does not fit 32 bits", v)
		return 0
	}
	return int32(v)
}

func (d *decoder) dataType() uint16 {
	v := d.uvarint()
	if v > math.MaxUint16 {
		d.fail("data type %d", v)
		return 0
	}
	return uint16(v)
}

// raw takes n bytes.
func (d *decoder) raw(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("a %d-byte field with %d bytes left", n, len(d.b))
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

// str reads a string; a NULL string (length 0) reads as "".
func (d *decoder) str() string {
	n := d.varint()
	if d.err != nil || n == 0 {
		return ""
	}
	if n < 0 {
		d.fail("string length %d", n)
		return ""
	}
	p := d.raw(uint64(n))
	if d.err != nil {
		return ""
	}
	if p[len(p)-1] != 0 {
		d.fail("string without its terminating NUL")
		return ""
	}
	return string(p[:len(p)-1])
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	return append([]byte(nil), d.raw(n)...)
}

func (d *decoder) proc() Proc {
	return Proc{Nspace: d.str(), Rank: d.uint32()}
}

// count reads the number of values a top-level pack holds.
func (d *decoder) count() int {
	n := d.int32()
	if d.err == nil && (n < 0 || n > maxCount) {
		d.fail("count %d", n)
	}
	return int(n)
}

// elems reads an element count inside a value, bounded like count.
func (d *decoder) elems() int {
	n := d.uvarint()
	if d.err == nil && n > maxCount {
		d.fail("%d elements", n)
	}
	return int(n)
}

// one reads a top-level pack that must hold one value, read by f.
func (d *decoder) one(what string, f func()) {
	if n := d.count(); d.err == nil && n != 1 {
		d.fail("%d values where one %s belongs", n, what)
	}
	if d.err == nil {
		f()
	}
}
