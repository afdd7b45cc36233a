//go:build linux

// Package wire is the fabric's frame format: the header in front of every
// frame the providers move, its kinds, the shorter forms the verbs
// provider sends, and the verbs provider's connection handshake.
// Everything here is little-endian and fixed-size. GetVerbs and ReadHello
// take bytes as another process sent them and check their length;
// Header.Get reads a header the shared-memory provider has already
// located in its ring.
package wire

import "encoding/binary"

// Frame kinds.
const (
	Eager  uint32 = 1 + iota // payload is the message
	RTS                      // request to send: the message is at addr in the sender
	FIN                      // the receiver has read rendezvous message id
	Notice                   // the fabric's own notice, outside matching: Tag says what, Src of whom
)

// FINRevoked is a FIN's Tag when it refuses a rendezvous message: its
// communicator is revoked at the receiver, which dropped it unread.
const FINRevoked int32 = 1

// Notices (a Notice frame's Tag).
const (
	NoticeFailed int32 = 1 + iota // world rank Src is known failed
	// NoticeRevoked: the communicator with context id Ctx and generation
	// ID is revoked; Size counts the hops the notice made.
	NoticeRevoked
)

// Header is a frame's header. Src is the sender's rank in the
// communicator whose context id is Ctx.
type Header struct {
	Kind uint32
	Ctx  uint32
	Src  int32
	Tag  int32
	Size uint64 // message length in bytes
	ID   uint64 // rendezvous: the sender's request id
	Addr uint64 // rendezvous: the message's address in the sender
	Key  uint32 // rendezvous: the key that grants access to it (verbs: rkey)
}

// HeaderLen is the length of a header's wire form (without key), which
// both providers put in front of a frame's payload.
const HeaderLen = 40

// Put writes h's wire form into b, with addr for h.Addr.
func (h *Header) Put(b []byte, addr uint64) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], h.Kind)
	le.PutUint32(b[4:], h.Ctx)
	le.PutUint32(b[8:], uint32(h.Src))
	le.PutUint32(b[12:], uint32(h.Tag))
	le.PutUint64(b[16:], h.Size)
	le.PutUint64(b[24:], h.ID)
	le.PutUint64(b[32:], addr)
}

// Get reads h from its wire form in b.
func (h *Header) Get(b []byte) {
	le := binary.LittleEndian
	h.Kind = le.Uint32(b[0:])
	h.Ctx = le.Uint32(b[4:])
	h.Src = int32(le.Uint32(b[8:]))
	h.Tag = int32(le.Uint32(b[12:]))
	h.Size = le.Uint64(b[16:])
	h.ID = le.Uint64(b[24:])
	h.Addr = le.Uint64(b[32:])
}

// The verbs provider's header lengths.
const (
	VerbsHeaderLen = HeaderLen + 8 // the common form, then the rkey and the credit count
	VerbsEagerLen  = 20            // an eager frame's: kind, context, source, tag, credits
)

// A compact frame is an eager frame with no header in its bytes: its
// header is the 32 bits of immediate data of the send that carries it —
// the context id in the low half, the tag in the high half — its source
// is the sending process, and it tells no credits. A message of exactly
// the link's MTU is then one packet, not two for a 20-byte header that
// spills over (soft-RoCE over Ethernet: 1 KiB), and every multiple of
// it one packet less. The verbs provider sends one when the message's
// source rank is the sender's world rank, its context id and tag fit,
// and it has no new credits to tell.

// Compact returns the immediate data of h's compact frame, or ok false
// when h has none: not an eager frame, or a context id or tag of more
// than 16 bits.
func Compact(h *Header) (imm uint32, ok bool) {
	if h.Kind != Eager || h.Ctx > 0xffff || h.Tag < 0 || h.Tag > 0xffff {
		return 0, false
	}
	return h.Ctx | uint32(h.Tag)<<16, true
}

// GetCompact reads the header of a compact frame of n bytes from the
// process whose rank is src.
func GetCompact(imm uint32, src int32, n int, h *Header) {
	*h = Header{Kind: Eager, Ctx: imm & 0xffff, Src: src, Tag: int32(imm >> 16), Size: uint64(n)}
}

// VerbsLen is the length of h's verbs header.
func VerbsLen(h *Header) int {
	if h.Kind == Eager {
		return VerbsEagerLen
	}
	return VerbsHeaderLen
}

// PutVerbs writes a verbs frame header. An eager frame's is short — its
// message's size is the rest of the frame, and it names no memory — since
// rxe copies and checksums every byte twice in software: 28 fewer bytes
// a small message. Other frames carry the common form, then the rkey of
// a rendezvous message and the credit count for the peer.
func PutVerbs(b []byte, h *Header, addr uint64, key, credit uint32) {
	le := binary.LittleEndian
	if h.Kind == Eager {
		// One length check for the five fields, not one per field: this is
		// every small message's header.
		e := (*[VerbsEagerLen]byte)(b)
		le.PutUint32(e[0:4], h.Kind)
		le.PutUint32(e[4:8], h.Ctx)
		le.PutUint32(e[8:12], uint32(h.Src))
		le.PutUint32(e[12:16], uint32(h.Tag))
		le.PutUint32(e[16:20], credit)
		return
	}
	h.Put(b, addr)
	le.PutUint32(b[HeaderLen:], key)
	le.PutUint32(b[HeaderLen+4:], credit)
}

// GetVerbs reads the header of frame b; it returns the header's length
// and the credit count, or ok false for a frame too short for its kind.
func GetVerbs(b []byte, h *Header) (n int, credit uint32, ok bool) {
	le := binary.LittleEndian
	if len(b) < 4 {
		return 0, 0, false
	}
	if le.Uint32(b) == Eager {
		if len(b) < VerbsEagerLen {
			return 0, 0, false
		}
		e := (*[VerbsEagerLen]byte)(b)
		*h = Header{Kind: Eager, Ctx: le.Uint32(e[4:8]), Src: int32(le.Uint32(e[8:12])), Tag: int32(le.Uint32(e[12:16])),
			Size: uint64(len(b) - VerbsEagerLen)}
		return VerbsEagerLen, le.Uint32(e[16:20]), true
	}
	if len(b) < VerbsHeaderLen {
		return 0, 0, false
	}
	h.Get(b)
	h.Key = le.Uint32(b[HeaderLen:])
	return VerbsHeaderLen, le.Uint32(b[HeaderLen+4:]), true
}

// Any is the source or tag of a receive that matches every sender or
// tag.
const Any = -1

// Matches reports whether a receive on context ctx from src with tag
// (either may be Any) takes the message h heads.
func (h *Header) Matches(ctx uint32, src, tag int) bool {
	return ctx == h.Ctx && (src == Any || src == int(h.Src)) && (tag == Any || tag == int(h.Tag))
}
