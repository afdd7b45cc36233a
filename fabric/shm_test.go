//go:build linux

package fabric

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
	a, err := newShmSegment("rivet-test", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := newShmSegment("rivet-test", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	paths, pids := []string{a.path, b.path}, []int{os.Getpid(), os.Getpid()}
	if err := a.connect(0, []int{0, 1}, paths, pids); err != nil {
		t.Fatal(err)
	}
	if err := b.connect(1, []int{0, 1}, paths, pids); err != nil {
		t.Fatal(err)
	}
	e := newEngine(1, 2)
	rng := rand.New(rand.NewPCG(1, 2))
	n := uint64(a.cells)
	var want [][]byte
	for burst := 0; burst < 20000; burst++ {
		for {
			size := rng.IntN(300)
			if rng.IntN(8) == 0 {
				size = rng.IntN(shmEager + 1)
			}
			p := make([]byte, size)
			o := a.out[1]
			for off := 0; off+8 <= size; off += 8 {
				cell := o.tail + uint64(shmseg.CellHeader+off)/shmseg.CellSize
				binary.LittleEndian.PutUint64(p[off:], cell+n+1) // the next lap's sequence here
			}
			if !a.send(1, &wire.Header{Kind: wire.Eager, Tag: int32(len(want)), Size: uint64(size)}, p) {
				break
			}
			want = append(want, p)
			if rng.IntN(3) == 0 {
				break
			}
		}
		for b.poll(e, 64) > 0 {
		}
		for u := e.unexp.head; u != nil; u = u.next {
			if len(want) == 0 {
				t.Fatalf("burst %d: a phantom frame (tag %d, %d bytes)", burst, u.h.Tag, len(u.buf))
			}
			if !bytes.Equal(u.buf, want[0]) {
				t.Fatalf("burst %d: frame tag %d: %d bytes differ from the %d sent", burst, u.h.Tag, len(u.buf), len(want[0]))
			}
			want = want[1:]
		}
		if len(want) != 0 {
			t.Fatalf("burst %d: %d frames sent were not received", burst, len(want))
		}
		e.unexp = reqList{}
	}
	if laps := a.out[1].tail / n; laps < 40 {
		t.Errorf("only %d laps of the ring", laps)
	}
}
