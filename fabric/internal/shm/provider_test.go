//go:build linux

package shm

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// TestShmRingFrames drives one ring in-process through thousands of laps
// with frames of every size, whose payloads are full of numbers that
// would pass for the sequence words of later laps. Every frame must come
// out once, in order, intact — and never a phantom one.
func TestShmRingFrames(t *testing.T) {
	a, err := New("rivet-test", 0, 2, 2, shmseg.Cells(2), [8]byte{1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New("rivet-test", 1, 2, 2, shmseg.Cells(2), [8]byte{2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	paths, pids := []string{a.path, b.path}, []int{os.Getpid(), os.Getpid()}
	if err := a.Connect([]int{0, 1}, paths, pids); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect([]int{0, 1}, paths, pids); err != nil {
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

// TestShmJoin: a process polls the rings of the peers that have sent to
// it, whichever order they came in, and no others; a peer that died
// while claiming a ring holds up no one; a peer that finds no ring left
// says why, and sends nothing more.
func TestShmJoin(t *testing.T) {
	const n = 4
	cells := shmseg.Cells(n)
	ps := make([]*Provider, n)
	paths, pids, local := make([]string, n), make([]int, n), make([]int, n)
	for w := range ps {
		// Rank 0's segment has a ring fewer than it needs.
		rings := n - 1
		if w == 0 {
			rings = n - 2
		}
		p, err := New("rivet-test", w, n, rings, cells, [8]byte{byte(w)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ps[w], paths[w], pids[w], local[w] = p, p.path, os.Getpid(), w
	}
	for _, p := range ps {
		if err := p.Connect(local, paths, pids); err != nil {
			t.Fatal(err)
		}
	}
	e := &frames{}
	send := func(from, to int, tag int32) bool {
		return ps[from].Send(to, &wire.Header{Kind: wire.Eager, Tag: tag, Size: 3}, []byte("abc"))
	}
	// A claim whose writer never names itself: a process killed in Join.
	atomic.AddUint64(shmseg.Word(ps[0].seg, shmseg.WordJoined), 1)
	if !send(3, 0, 30) {
		t.Fatal("rank 3 found no room")
	}
	if send(2, 0, 20) {
		t.Fatal("rank 2 sent to rank 0 with every ring taken")
	}
	if err := ps[2].SendErr(0); err == nil || !strings.Contains(err.Error(), "world rank 0") {
		t.Errorf("rank 2's error sending to rank 0: %v", err)
	}
	if send(2, 0, 21) {
		t.Fatal("rank 2 sent after its join failed")
	}
	if ps[1].SendErr(0) != nil || ps[3].SendErr(0) != nil {
		t.Error("an error sending where nothing failed")
	}
	for ps[0].Poll(e, 64) > 0 {
	}
	if len(e.got) != 1 || e.got[0].tag != 30 || len(ps[0].in) != 1 || ps[0].in[0].world != 3 || len(ps[0].naming) != 1 {
		t.Fatalf("rank 0 got %+v, polls %d rings, waits for %d names", e.got, len(ps[0].in), len(ps[0].naming))
	}
	e.got = e.got[:0]
	for w := 1; w < n; w++ {
		if w != 2 && !send(w, 2, int32(w)) {
			t.Fatalf("rank %d found no room at rank 2", w)
		}
	}
	for ps[2].Poll(e, 64) > 0 {
	}
	if len(e.got) != 2 || len(ps[2].in) != 2 || len(ps[1].in) != 0 {
		t.Fatalf("rank 2 got %+v from %d rings; rank 1 polls %d", e.got, len(ps[2].in), len(ps[1].in))
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
