// Package elem answers what the communication layers need to know about
// an element type: whether its bytes mean anything in another process
// (no pointers), its size, and its bytes.
package elem

import (
	"reflect"
	"sync"
	"unsafe"
)

var plain sync.Map // reflect.Type -> bool

// Plain reports whether T holds no pointers (nor strings, slices, maps,
// channels, funcs or interfaces), so that its bytes can be copied into
// another process. Numbers answer without a map lookup.
func Plain[T any]() bool {
	t := reflect.TypeFor[T]()
	if k := t.Kind(); k >= reflect.Bool && k <= reflect.Complex128 {
		return true
	}
	if v, ok := plain.Load(t); ok {
		return v.(bool)
	}
	p := !hasPointers(t)
	plain.Store(t, p)
	return p
}

func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return hasPointers(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func, reflect.Interface, reflect.String, reflect.UnsafePointer:
		return true
	}
	return false
}

// Size is T's size in bytes.
func Size[T any]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// Bytes is s's memory as bytes (empty, not nil, for an empty s).
func Bytes[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*Size[T]())
}
