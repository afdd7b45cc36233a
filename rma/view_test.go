//go:build linux

package rma

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/rivet-hpc/rivet/internal/elem"
)

// TestView: window memory as a typed slice, aliasing it, and clear
// errors for memory that is not a whole number of aligned elements and
// for element types with pointers or no size.
func TestView(t *testing.T) {
	mem := elem.Bytes(make([]uint64, 4)) // 32 aligned bytes
	v, err := viewOf[int64](mem)
	if err != nil || len(v) != 4 || unsafe.Pointer(&v[0]) != unsafe.Pointer(&mem[0]) {
		t.Fatalf("viewOf[int64] of 32 bytes: %d elements, %v", len(v), err)
	}
	v[3] = -1
	if mem[31] != 0xff {
		t.Errorf("a store through the view did not reach the memory")
	}
	if v, err := viewOf[int32](mem[4:12]); err != nil || len(v) != 2 {
		t.Errorf("viewOf[int32] of 8 bytes at 4: %d elements, %v", len(v), err)
	}
	if v, err := viewOf[float64](nil); err != nil || v != nil {
		t.Errorf("viewOf of no memory: %v, %v", v, err)
	}
	for name, err := range map[string]error{
		"12 bytes of int64":   func() error { _, err := viewOf[int64](mem[:12]); return err }(),
		"unaligned int64":     func() error { _, err := viewOf[int64](mem[4:20]); return err }(),
		"pointers":            func() error { _, err := viewOf[*int](mem); return err }(),
		"a type with no size": func() error { _, err := viewOf[struct{}](mem); return err }(),
	} {
		if !errors.Is(err, ErrType) {
			t.Errorf("%s: %v, want ErrType", name, err)
		}
	}
}
