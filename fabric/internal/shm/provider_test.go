//go:build linux

package shm

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// TestShmRingFrames drives one ring in-process through thousands of laps
// with frames of every size, whose payloads are full of numbers that
// would pass for the sequence words of later laps. Every frame must come
// out once, in order, intact — and never a phantom one.
func TestShmRingFrames(t *testing.T) {
	a, err := New("rivet-test", 0, 2, shmseg.Cells(2), [8]byte{1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New("rivet-test", 1, 2, shmseg.Cells(2), [8]byte{2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	paths, pids := []string{a.path, b.path}, []int{os.Getpid(), os.Getpid()}
	if err := a.Connect(0, []int{0, 1}, paths, pids); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(1, []int{0, 1}, paths, pids); err != nil {
		t.Fatal(err)
	}
	e := &frames{}
	rng := rand.New(rand.NewPCG(1, 2))
	n := uint64(a.cells)
	var want [][]byte
	for burst := 0; burst < 20000; burst++ {
		for {
			size := rng.IntN(300)
			if rng.IntN(8) == 0 {
				size = rng.IntN(Eager + 1)
			}
			p := make([]byte, size)
			o := a.out[1]
			for off := 0; off+8 <= size; off += 8 {
				cell := o.tail + uint64(shmseg.CellHeader+off)/shmseg.CellSize
				binary.LittleEndian.PutUint64(p[off:], cell+n+1) // the next lap's sequence here
			}
			if !a.Send(1, &wire.Header{Kind: wire.Eager, Tag: int32(len(want)), Size: uint64(size)}, p) {
				break
			}
			want = append(want, p)
			if rng.IntN(3) == 0 {
				break
			}
		}
		for b.Poll(e, 64) > 0 {
		}
		for _, f := range e.got {
			if len(want) == 0 {
				t.Fatalf("burst %d: a phantom frame (tag %d, %d bytes)", burst, f.tag, len(f.buf))
			}
			if !bytes.Equal(f.buf, want[0]) {
				t.Fatalf("burst %d: frame tag %d: %d bytes differ from the %d sent", burst, f.tag, len(f.buf), len(want[0]))
			}
			want = want[1:]
		}
		if len(want) != 0 {
			t.Fatalf("burst %d: %d frames sent were not received", burst, len(want))
		}
		e.got = e.got[:0]
	}
	if laps := a.out[1].tail / n; laps < 40 {
		t.Errorf("only %d laps of the ring", laps)
	}
}

// frames is an Engine that keeps the frames delivered to it.
type frames struct {
	got []struct {
		tag int32
		buf []byte
	}
}

func (f *frames) Deliver(peer int, h *wire.Header, p *wire.Payload) {
	f.got = append(f.got, struct {
		tag int32
		buf []byte
	}{h.Tag, p.AppendTo(nil)})
}
func (f *frames) Sending(int, uint64) ([]byte, bool) { return nil, false }
func (f *frames) Abandoned(any) bool                 { return false }
func (f *frames) ReadDone(any, int, uint64, error)   {}
