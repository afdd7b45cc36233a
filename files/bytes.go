//go:build linux

package files

import (
	"unsafe"

	"github.com/rivet-hpc/rivet/fabric"
)

// Bytes is the memory of s as bytes, without copying, for the data
// access calls, which take bytes: with a view whose etype is T's size,
// offsets count elements.
func Bytes[T fabric.Elem](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}
