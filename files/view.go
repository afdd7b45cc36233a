//go:build linux

package files

import (
	"fmt"
	"sort"
)

// A Filetype says which etypes of each tile of a file a view shows
// (MPI's filetype): a file seen through a view is the tile repeated from
// the view's displacement on, and a process reads and writes, in order,
// only the blocks its filetype lists. Units are etypes. The zero
// Filetype is contiguous: every etype.
type Filetype struct {
	extent int64
	blocks []Block
}

// Block is a run of a filetype: Len etypes from Off.
type Block struct {
	Off, Len int64
}

// Contiguous is the filetype that shows every etype (the zero Filetype).
func Contiguous() Filetype { return Filetype{} }

// Indexed is the filetype whose tile is extent etypes long and shows
// blocks, which must be in order, not overlap and lie within the tile
// (MPI's monotonic filetypes, built with MPI_Type_indexed and
// MPI_Type_create_resized).
func Indexed(extent int64, blocks ...Block) (Filetype, error) {
	if extent <= 0 {
		return Filetype{}, fmt.Errorf("%w: a tile of %d etypes", ErrView, extent)
	}
	var out []Block
	end := int64(0)
	for _, b := range blocks {
		switch {
		case b.Len == 0:
			continue
		case b.Off < end || b.Len < 0 || b.Off+b.Len > extent:
			return Filetype{}, fmt.Errorf("%w: block %+v (blocks must be in order, not overlap, and lie within the tile of %d)", ErrView, b, extent)
		}
		if n := len(out); n > 0 && out[n-1].Off+out[n-1].Len == b.Off {
			out[n-1].Len += b.Len
		} else {
			out = append(out, b)
		}
		end = b.Off + b.Len
	}
	if len(out) == 0 {
		return Filetype{}, fmt.Errorf("%w: a filetype that shows nothing", ErrView)
	}
	if len(out) == 1 && out[0].Off == 0 && out[0].Len == extent {
		return Filetype{}, nil
	}
	return Filetype{extent: extent, blocks: out}, nil
}

// BlockCyclic is process r's filetype of n processes that take blocks
// of block etypes in turn: r's are block r, r+n, r+2n... (MPI_Type_vector
// resized to the cycle, or a one-dimensional cyclic darray).
func BlockCyclic(block, n, r int64) (Filetype, error) {
	if block <= 0 || n <= 0 || r < 0 || r >= n {
		return Filetype{}, fmt.Errorf("%w: BlockCyclic(%d, %d, %d)", ErrView, block, n, r)
	}
	return Indexed(n*block, Block{r * block, block})
}

// Subarray is the filetype of a subarray of a row-major array: sizes
// is the whole array's shape, subsizes and starts the subarray's
// (MPI_Type_create_subarray with MPI_ORDER_C). Its tile is the whole
// array, so successive arrays in the file (time steps) follow one
// another.
func Subarray(sizes, subsizes, starts []int) (Filetype, error) {
	d := len(sizes)
	if d == 0 || len(subsizes) != d || len(starts) != d {
		return Filetype{}, fmt.Errorf("%w: Subarray of %d, %d and %d dimensions", ErrView, len(sizes), len(subsizes), len(starts))
	}
	total := int64(1)
	for i := range d {
		if sizes[i] <= 0 || subsizes[i] <= 0 || starts[i] < 0 || starts[i]+subsizes[i] > sizes[i] {
			return Filetype{}, fmt.Errorf("%w: Subarray dimension %d: size %d, subsize %d, start %d", ErrView, i, sizes[i], subsizes[i], starts[i])
		}
		total *= int64(sizes[i])
	}
	// Rows of the last dimension, in row-major order.
	var blocks []Block
	idx := make([]int, d-1) // position within subsizes[:d-1]
	for {
		off := int64(0)
		for i := range d - 1 {
			off = off*int64(sizes[i]) + int64(starts[i]+idx[i])
		}
		off = off*int64(sizes[d-1]) + int64(starts[d-1])
		blocks = append(blocks, Block{off, int64(subsizes[d-1])})
		i := d - 2
		for ; i >= 0; i-- {
			if idx[i]++; idx[i] < subsizes[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			break
		}
	}
	return Indexed(total, blocks...)
}

// view is a Filetype in bytes, placed at a displacement: where each
// byte a process reads or writes through it goes in the file.
type view struct {
	disp   int64
	esize  int64
	extent int64 // bytes; 0: contiguous
	segs   []Block
	cum    []int64 // cum[i]: the bytes of segs before segs[i]; len(segs)+1
}

func makeView(disp int64, esize int, ft Filetype) (view, error) {
	if disp < 0 || esize <= 0 {
		return view{}, fmt.Errorf("%w: displacement %d, etype of %d bytes", ErrView, disp, esize)
	}
	e := int64(esize)
	v := view{disp: disp, esize: e}
	if ft.extent == 0 {
		return v, nil
	}
	v.extent = ft.extent * e
	v.segs = make([]Block, len(ft.blocks))
	v.cum = make([]int64, len(ft.blocks)+1)
	for i, b := range ft.blocks {
		v.segs[i] = Block{b.Off * e, b.Len * e}
		v.cum[i+1] = v.cum[i] + b.Len*e
	}
	return v, nil
}

// run is a piece of an access: n bytes at file offset file, from offset
// buf of the process's buffer.
type run struct {
	file, buf, n int64
}

// runs appends to out the file runs of the n bytes a process reads or
// writes from byte p of what it sees through v, adjacent runs joined.
// They are in increasing file order (filetypes are monotonic).
func (v *view) runs(p, n int64, out []run) []run {
	if n <= 0 {
		return out
	}
	if v.extent == 0 {
		return append(out, run{v.disp + p, 0, n})
	}
	per := v.cum[len(v.segs)]
	tile, in := p/per, p%per
	i := sort.Search(len(v.segs), func(i int) bool { return v.cum[i+1] > in })
	buf := int64(0)
	for n > 0 {
		s := v.segs[i]
		skip := in - v.cum[i]
		l := min(s.Len-skip, n)
		f := v.disp + tile*v.extent + s.Off + skip
		if k := len(out); k > 0 && out[k-1].file+out[k-1].n == f && out[k-1].buf+out[k-1].n == buf {
			out[k-1].n += l
		} else {
			out = append(out, run{f, buf, l})
		}
		buf += l
		n -= l
		if i++; i == len(v.segs) {
			i, tile = 0, tile+1
		}
		in = v.cum[i]
	}
	return out
}

// visible is how many bytes a process sees through v of a file of size
// bytes: where a seek from the end starts.
func (v *view) visible(size int64) int64 {
	if size <= v.disp {
		return 0
	}
	s := size - v.disp
	if v.extent == 0 {
		return s
	}
	per := v.cum[len(v.segs)]
	n := s / v.extent * per
	r := s % v.extent
	for _, seg := range v.segs {
		if r <= seg.Off {
			break
		}
		n += min(seg.Len, r-seg.Off)
	}
	return n
}
