//go:build linux

package rma

import (
	"fmt"
	"reflect"
	"unsafe"
)

// View returns this process's window memory as a slice of T — Base,
// typed — for reading and writing one's own window without package
// unsafe. T must hold no pointers, and the memory must be a whole number
// of T aligned to T. The slice aliases the window's memory: it is valid
// until Free, and loads and stores on it follow the memory model of
// Base (MPI_WIN_UNIFIED: synchronize as for any local access).
func View[T any](w *Window) ([]T, error) {
	return viewOf[T](w.Base())
}

// SharedView is SharedQuery typed: rank r's window memory as this
// process maps it, as a slice of T, with r's displacement unit, for
// windows whose processes share memory (AllocateShared, or any window
// whose members are on this node). The same conditions as View hold.
func SharedView[T any](w *Window, r int) ([]T, int, error) {
	b, unit, err := w.SharedQuery(r)
	if err != nil {
		return nil, 0, err
	}
	s, err := viewOf[T](b)
	return s, unit, err
}

// viewOf is b as a []T, if it can be.
func viewOf[T any](b []byte) ([]T, error) {
	if err := plainCheck[T](); err != nil {
		return nil, err
	}
	var zero T
	size, align := unsafe.Sizeof(zero), unsafe.Alignof(zero)
	switch {
	case size == 0:
		return nil, fmt.Errorf("%w: a view of %v, which has no size", ErrType, reflect.TypeFor[T]())
	case len(b) == 0:
		return nil, nil
	case uintptr(len(b))%size != 0:
		return nil, fmt.Errorf("%w: %d bytes of window memory are not a whole number of %v (%d bytes)", ErrType, len(b), reflect.TypeFor[T](), size)
	case uintptr(unsafe.Pointer(&b[0]))%align != 0:
		return nil, fmt.Errorf("%w: window memory at %p is not aligned to %v (%d bytes)", ErrType, &b[0], reflect.TypeFor[T](), align)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), uintptr(len(b))/size), nil
}
