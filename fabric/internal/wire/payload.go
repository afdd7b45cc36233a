//go:build linux

package wire

import "slices"

// Payload is an arrived frame's payload: contiguous (Flat), or N bytes
// of a ring from byte Off, wrapping around the ring's end. It is valid
// only while the provider hands it over.
type Payload struct {
	Flat []byte
	Ring []byte
	Off  int
	N    int
}

// Len is the payload's length.
func (p *Payload) Len() int {
	if p.Ring == nil {
		return len(p.Flat)
	}
	return p.N
}

// CopyTo copies the payload's first len(dst) bytes into dst.
func (p *Payload) CopyTo(dst []byte) {
	if p.Ring == nil {
		copy(dst, p.Flat)
		return
	}
	dst = dst[:min(len(dst), p.N)]
	m := copy(dst, p.Ring[p.Off:])
	copy(dst[m:], p.Ring)
}

// AppendTo appends the whole payload to b.
func (p *Payload) AppendTo(b []byte) []byte {
	n := p.Len()
	b = slices.Grow(b, n)[:len(b)+n]
	p.CopyTo(b[len(b)-n:])
	return b
}
