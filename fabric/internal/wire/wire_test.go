//go:build linux

package wire

import (
	"bytes"
	"errors"
	"testing"
)

// TestHeaderRoundTrip: what Put writes Get reads back, and the verbs
// forms carry what each kind needs — an eager frame's size is the rest of
// the frame, and only its first five fields travel.
func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Kind: RTS, Ctx: 7, Src: -1, Tag: 1 << 30, Size: 1 << 40, ID: 99, Addr: 0xdeadbeef, Key: 0x1234}
	b := make([]byte, HeaderLen)
	h.Put(b, h.Addr)
	var got Header
	got.Get(b)
	got.Key = h.Key // the common form does not carry it
	if got != h {
		t.Errorf("common form: got %+v, want %+v", got, h)
	}

	vb := make([]byte, VerbsHeaderLen)
	PutVerbs(vb, &h, h.Addr, h.Key, 42)
	got = Header{}
	n, credit, ok := GetVerbs(vb, &got)
	if !ok || n != VerbsHeaderLen || credit != 42 || got != h {
		t.Errorf("verbs RTS: %d %d %v %+v, want %+v", n, credit, ok, got, h)
	}
	if VerbsLen(&h) != VerbsHeaderLen {
		t.Errorf("VerbsLen(RTS) = %d", VerbsLen(&h))
	}

	e := Header{Kind: Eager, Ctx: 3, Src: 2, Tag: 5}
	frame := append(make([]byte, VerbsEagerLen), "payload"...)
	PutVerbs(frame, &e, 0, 0, 9)
	got = Header{}
	n, credit, ok = GetVerbs(frame, &got)
	e.Size = uint64(len("payload"))
	if !ok || n != VerbsEagerLen || credit != 9 || got != e {
		t.Errorf("verbs eager: %d %d %v %+v, want %+v", n, credit, ok, got, e)
	}
	for _, short := range [][]byte{nil, {1, 0, 0}, vb[:VerbsHeaderLen-1], frame[:VerbsEagerLen-1]} {
		if _, _, ok := GetVerbs(short, &got); ok {
			t.Errorf("GetVerbs took a %d-byte frame", len(short))
		}
	}
}

func TestHello(t *testing.T) {
	h := Hello{Rank: 3, Token: [16]byte{1, 2, 3}, QPN: 17, PSN: 0xabcdef, Credits: 4}
	b := h.Marshal()
	if len(b) != HelloLen {
		t.Fatalf("%d bytes, want %d", len(b), HelloLen)
	}
	got, err := ReadHello(bytes.NewReader(b))
	if err != nil || got != h {
		t.Errorf("got %+v %v, want %+v", got, err, h)
	}
	b[0] = 'X'
	if _, err := ReadHello(bytes.NewReader(b)); !errors.Is(err, ErrNotHello) {
		t.Errorf("wrong magic: %v", err)
	}
	if _, err := ReadHello(bytes.NewReader(b[:HelloLen-1])); err == nil {
		t.Error("a short message was taken")
	}
}

// FuzzGetVerbs: any bytes give a header or ok false — no panic — and a
// header taken re-encodes to the bytes it came from.
func FuzzGetVerbs(f *testing.F) {
	vb := make([]byte, VerbsHeaderLen)
	PutVerbs(vb, &Header{Kind: RTS, Ctx: 1, ID: 2, Size: 3}, 4, 5, 6)
	f.Add(vb)
	eb := make([]byte, VerbsEagerLen+3)
	PutVerbs(eb, &Header{Kind: Eager, Tag: 8}, 0, 0, 1)
	f.Add(eb)
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Header
		n, credit, ok := GetVerbs(b, &h)
		if !ok {
			return
		}
		if n > len(b) || n != VerbsLen(&h) {
			t.Fatalf("%d-byte frame: header of %d, VerbsLen %d", len(b), n, VerbsLen(&h))
		}
		again := make([]byte, n)
		PutVerbs(again, &h, h.Addr, h.Key, credit)
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("%x re-encodes as %x", b[:n], again)
		}
	})
}

// FuzzReadHello: any bytes give a handshake or an error, and a handshake
// taken marshals back to the bytes it came from.
func FuzzReadHello(f *testing.F) {
	f.Add((&Hello{Rank: 1, QPN: 2, PSN: 3}).Marshal())
	f.Add([]byte(HelloMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHello(bytes.NewReader(b))
		if err != nil {
			return
		}
		if !bytes.Equal(h.Marshal(), b[:HelloLen]) {
			t.Fatalf("%x marshals back as %x", b[:HelloLen], h.Marshal())
		}
	})
}

// TestCompact: the compact form holds a context id and a tag of 16 bits
// each and nothing else; GetCompact gives back the header, its source
// the sender and its size the frame's.
func TestCompact(t *testing.T) {
	for _, h := range []Header{
		{Kind: Eager, Ctx: 0, Tag: 0},
		{Kind: Eager, Ctx: 0xffff, Tag: 0xffff},
		{Kind: Eager, Ctx: 12, Tag: 7},
	} {
		imm, ok := Compact(&h)
		if !ok {
			t.Errorf("%+v: no compact form", h)
			continue
		}
		var got Header
		GetCompact(imm, 5, 1024, &got)
		if want := (Header{Kind: Eager, Ctx: h.Ctx, Src: 5, Tag: h.Tag, Size: 1024}); got != want {
			t.Errorf("%+v: back as %+v, want %+v", h, got, want)
		}
	}
	for _, h := range []Header{
		{Kind: Eager, Ctx: 0x10000},
		{Kind: Eager, Tag: 0x10000},
		{Kind: Eager, Tag: -1},
		{Kind: RTS},
		{Kind: FIN},
		{Kind: Notice},
	} {
		if imm, ok := Compact(&h); ok {
			t.Errorf("%+v: compact form %#x", h, imm)
		}
	}
}
