//go:build linux

package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
)

// HelloMagic opens every handshake message of the verbs provider.
const HelloMagic = "RIVETVC2"

// HelloLen is a handshake message's length on the wire.
const HelloLen = len(HelloMagic) + 4 + 16 + 12

// ErrNotHello is returned by ReadHello for bytes that are not a Rivet
// handshake.
var ErrNotHello = errors.New("not a Rivet handshake")

// Hello is a verbs handshake message, exchanged over TCP to connect two
// queue pairs: who sends it, the token of the process it goes to (which
// that process published through the bootstrap, so that a stranger
// cannot connect), the sender's queue pair for it, and the credits it
// grants the receiver to start with: how many eager frames the receiver
// may send before it hears more (a running count, as a frame header's).
type Hello struct {
	Rank     uint32
	Token    [16]byte
	QPN, PSN uint32
	Credits  uint32
}

// Marshal returns h's HelloLen bytes.
func (h *Hello) Marshal() []byte {
	b := make([]byte, 0, HelloLen)
	b = append(b, HelloMagic...)
	b = binary.LittleEndian.AppendUint32(b, h.Rank)
	b = append(b, h.Token[:]...)
	b = binary.LittleEndian.AppendUint32(b, h.QPN)
	b = binary.LittleEndian.AppendUint32(b, h.PSN)
	return binary.LittleEndian.AppendUint32(b, h.Credits)
}

// ReadHello reads one handshake message from r.
func ReadHello(r io.Reader) (Hello, error) {
	var b [HelloLen]byte
	var h Hello
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return h, err
	}
	if !bytes.Equal(b[:8], []byte(HelloMagic)) {
		return h, ErrNotHello
	}
	h.Rank = binary.LittleEndian.Uint32(b[8:])
	copy(h.Token[:], b[12:28])
	h.QPN = binary.LittleEndian.Uint32(b[28:])
	h.PSN = binary.LittleEndian.Uint32(b[32:])
	h.Credits = binary.LittleEndian.Uint32(b[36:])
	return h, nil
}
