//go:build linux

package files

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

// A layout is how n processes share a file of 8-byte elements: rank r's
// filetype, how many elements each writes per call, and — computed from
// the layout's definition, not from the view code — which element of
// the file rank r's i-th element is.
type layout struct {
	name  string
	ft    func(n, r int) (Filetype, error)
	count int
	where func(n, r, i int) int64
}

var layouts = []layout{
	{"contiguous", func(n, r int) (Filetype, error) { return Indexed(int64(n*300), Block{int64(r * 300), 300}) }, 300,
		func(n, r, i int) int64 { return int64(i/300*n*300 + r*300 + i%300) }},
	{"cyclic-small", func(n, r int) (Filetype, error) { return BlockCyclic(3, int64(n), int64(r)) }, 999,
		func(n, r, i int) int64 { return int64(i/3*n*3 + r*3 + i%3) }},
	{"cyclic-large", func(n, r int) (Filetype, error) { return BlockCyclic(16<<10, int64(n), int64(r)) }, 5 * 16 << 10,
		func(n, r, i int) int64 { return int64(i/(16<<10)*n*(16<<10) + r*(16<<10) + i%(16<<10)) }},
	// A 2-D array of 37 rows by 11n columns, rank r's columns 11r to 11r+10.
	{"subarray", func(n, r int) (Filetype, error) {
		return Subarray([]int{37, 11 * n}, []int{37, 11}, []int{0, 11 * r})
	}, 37 * 11, func(n, r, i int) int64 {
		a := i / (37 * 11) // which array
		i %= 37 * 11
		return int64(a*37*11*n + i/11*11*n + 11*r + i%11)
	}},
}

var hintCases = []struct {
	name string
	h    Hints
}{
	{"auto", Hints{}},
	{"independent", Hints{Buffering: BufferingOff}},
	{"one-aggregator", Hints{Buffering: BufferingOn, Aggregators: 1, BufferSize: 4096}},
	{"two-aggregators", Hints{Buffering: BufferingOn, Aggregators: 2, BufferSize: 12288}},
	{"every-aggregator", Hints{Buffering: BufferingOn}},
}

func value(r, i int) uint64 { return uint64(r)<<40 | uint64(i)*2654435761%(1<<40) + 1 }

func elems(b []byte) []uint64 {
	out := make([]uint64, len(b)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out
}

// progLayouts: every layout, with every kind of hints, written
// collectively in two calls (the second at an offset) and read back
// collectively through the views and independently as a whole; every
// byte is checked. Then the same with the independent calls.
func progLayouts(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	for _, l := range layouts {
		for _, hc := range hintCases {
			for _, coll := range []bool{true, false} {
				if !coll && hc.name != "auto" {
					continue
				}
				what := fmt.Sprintf("%s/%s/collective=%v", l.name, hc.name, coll)
				checkLayout(ctx, c, l, hc.h, coll, what)
			}
		}
	}
	return nil
}

func checkLayout(ctx context.Context, c *fabric.Comm, l layout, h Hints, coll bool, what string) {
	n, me := c.Size(), c.Rank()
	p := filepath.Join(dir(), "layout")
	f, err := Open(ctx, c, p, ModeCreate|ModeRdWr|ModeDeleteOnClose, h)
	must(err, what+": open")
	ft, err := l.ft(n, me)
	must(err, what+": filetype")
	must(f.SetView(ctx, 16, 8, ft), what+": view")
	data := make([]byte, 16*l.count)
	for i := range 2 * l.count {
		binary.LittleEndian.PutUint64(data[8*i:], value(me, i))
	}
	for k := range 2 {
		part := data[8*k*l.count : 8*(k+1)*l.count]
		var got int
		if coll {
			got, err = f.WriteAtAll(ctx, int64(k*l.count), part)
		} else {
			got, err = f.WriteAt(int64(k*l.count), part)
		}
		must(err, what+": write")
		if got != len(part) {
			failf("%s: wrote %d bytes of %d", what, got, len(part))
		}
	}
	must(f.Sync(ctx), what+": sync")
	back := make([]byte, len(data))
	if coll {
		_, err = f.ReadAtAll(ctx, 0, back)
	} else {
		_, err = f.ReadAt(0, back)
	}
	must(err, what+": read back")
	for i, v := range elems(back) {
		if v != value(me, i) {
			failf("%s: element %d read back through the view: %#x, want %#x", what, i, v, value(me, i))
		}
	}
	// The whole file, independently, against the layout's definition.
	must(f.SetView(ctx, 0, 1, Contiguous()), what+": plain view")
	size, err := f.Size()
	must(err, what+": size")
	whole := make([]byte, size)
	if _, err := f.ReadAt(0, whole); err != nil {
		failf("%s: read the whole file: %v", what, err)
	}
	for r := range n {
		for i := range 2 * l.count {
			at := 16 + 8*l.where(n, r, i)
			if got := binary.LittleEndian.Uint64(whole[at:]); got != value(r, i) {
				failf("%s: rank %d's element %d at byte %d: %#x, want %#x", what, r, i, at, got, value(r, i))
			}
		}
	}
	must(collectives.Barrier(ctx, c), what+": barrier")
	must(f.Close(ctx), what+": close")
}
