// Package reduce holds the reduction operations (MPI_Op) that the
// collectives and one-sided layers share: their typed form, which the
// public package op names, and the byte kernels both layers apply.
package reduce

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"
)

// Kind names a built-in operation, so that a layer can pick a native
// path for it (a NIC's fetch-and-add for a sum, a CPU atomic for a
// replace); User is any other.
type Kind uint8

const (
	User Kind = iota
	KSum
	KProd
	KMin
	KMax
	KBand
	KBor
	KBxor
	KLand
	KLor
	KLxor
	KMinLoc
	KMaxLoc
	KReplace // MPI_REPLACE: one-sided operations only
	KNoOp    // MPI_NO_OP: one-sided operations only
)

// Untyped is an operation with its element type erased: what schedules
// and one-sided paths apply to raw bytes.
type Untyped struct {
	Name        string
	Kind        Kind
	Commutative bool
	// Fn sets inout[i] = in[i] ⊕ inout[i], in holding the operand of
	// the lower ranks — MPI's convention for user functions.
	Fn func(in, inout []byte)
	// Elem is the element type's kind (built-in operations only), for
	// layers that compute an operation inline.
	Elem reflect.Kind
}

// Op is a reduction operation over elements of type T (MPI_Op, typed):
// the public op.Op is this type. Ops are values; building one allocates
// nothing but NewOp's closure.
type Op[T any] struct{ u Untyped }

// Name is the operation's name ("sum", "minloc", or NewOp's).
func (o Op[T]) Name() string { return o.u.Name }

// Commutative reports whether operand order does not matter; a
// non-commutative Op is applied in rank order.
func (o Op[T]) Commutative() bool { return o.u.Commutative }

// Reduce sets inout[i] = in[i] ⊕ inout[i] for every i < len(inout);
// in must be at least as long. For Replace, inout[i] = in[i]; for NoOp,
// inout is left alone.
func (o Op[T]) Reduce(in, inout []T) {
	if o.u.Fn == nil || len(inout) == 0 {
		return
	}
	in = in[:len(inout)]
	o.u.Fn(bytesOf(in), bytesOf(inout))
}

// Erase returns o's untyped form, for the layers that apply it to bytes.
func Erase[T any](o Op[T]) Untyped { return o.u }

// Ref is Erase without the copy, for hot paths.
func Ref[T any](o *Op[T]) *Untyped { return &o.u }

// ErrOp is returned for a missing Op, or one a call cannot take.
var ErrOp = errors.New("rivet: invalid reduction operation")

// Check returns o's untyped form, or an error if o is the zero Op.
func Check[T any](o Op[T]) (Untyped, error) {
	if o.u.Fn == nil {
		return Untyped{}, fmt.Errorf("%w: none given", ErrOp)
	}
	return o.u, nil
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// Integer and Float are the element types of the built-in operations.
type (
	Integer interface {
		~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
	}
	Float  interface{ ~float32 | ~float64 }
	Number interface{ Integer | Float }
)

func view[T any](b []byte) []T {
	var z T
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

func builtin[T any](name string, kind Kind, fn func(in, inout []T)) Op[T] {
	return Op[T]{Untyped{Name: name, Kind: kind, Commutative: true, Fn: func(in, inout []byte) { fn(view[T](in), view[T](inout)) }, Elem: reflect.TypeFor[T]().Kind()}}
}

// Sum is MPI_SUM.
func Sum[T Number | ~complex64 | ~complex128]() Op[T] {
	if fn := packedSum[T](); fn != nil {
		return Op[T]{Untyped{Name: "sum", Kind: KSum, Commutative: true, Fn: fn, Elem: reflect.TypeFor[T]().Kind()}}
	}
	return builtin[T]("sum", KSum, sumFn[T])
}

// packedSum is the sum in packed lanes (sum_amd64.s) for integer and
// float elements, or nil: Go does not vectorize sumFn. Signed integers
// wrap as unsigned ones do.
func packedSum[T any]() func(in, inout []byte) {
	var z T
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		switch unsafe.Sizeof(z) {
		case 1:
			return sumBytes
		case 2:
			return sumU16
		case 4:
			return sumU32
		case 8:
			return sumU64
		}
	case reflect.Float32:
		return sumF32
	case reflect.Float64:
		return sumF64
	}
	return nil
}

// sumBytes adds byte-wise (wrapping): 64 bytes at a time in packed
// lanes, the rest eight lanes per 64-bit word — the low seven bits of
// each lane add without crossing lanes, and the top bit is the XOR of
// the operands' top bits and the carry into it.
func sumBytes(in, inout []byte) {
	k := packed(sum8x64, in, inout)
	in, inout = in[k:], inout[k:]
	const lo, hi = 0x7f7f7f7f7f7f7f7f, 0x8080808080808080
	n := len(inout) / 8
	if n > 0 {
		a := unsafe.Slice((*uint64)(unsafe.Pointer(&in[0])), n)
		b := unsafe.Slice((*uint64)(unsafe.Pointer(&inout[0])), n)
		for i := range b {
			x, y := a[i], b[i]
			b[i] = ((x & lo) + (y & lo)) ^ ((x ^ y) & hi)
		}
	}
	for i := n * 8; i < len(inout); i++ {
		inout[i] += in[i]
	}
}

// packed runs kernel over inout's whole 64-byte blocks, if this
// architecture has kernels, and returns how many bytes it covered.
func packed(kernel func(in, inout []byte), in, inout []byte) int {
	in = in[:len(inout)] // in's bounds checked here, not in assembly or unsafe code
	if !haveSumKernels {
		return 0
	}
	kernel(in, inout)
	return len(inout) &^ 63
}

// sumPacked adds with kernel over whole 64-byte blocks and in Go after.
func sumPacked[T Number](kernel func(in, inout []byte), in, inout []byte) {
	k := packed(kernel, in, inout)
	sumFn(view[T](in[k:]), view[T](inout[k:]))
}

func sumU16(in, inout []byte) { sumPacked[uint16](sum16x64, in, inout) }
func sumU32(in, inout []byte) { sumPacked[uint32](sum32x64, in, inout) }
func sumU64(in, inout []byte) { sumPacked[uint64](sum64x64, in, inout) }
func sumF32(in, inout []byte) { sumPacked[float32](sumF32x64, in, inout) }
func sumF64(in, inout []byte) { sumPacked[float64](sumF64x64, in, inout) }

// Prod is MPI_PROD.
func Prod[T Number | ~complex64 | ~complex128]() Op[T] { return builtin[T]("prod", KProd, prodFn[T]) }

// Min is MPI_MIN.
func Min[T Number]() Op[T] { return builtin[T]("min", KMin, minFn[T]) }

// Max is MPI_MAX.
func Max[T Number]() Op[T] { return builtin[T]("max", KMax, maxFn[T]) }

// Band is MPI_BAND, bitwise and.
func Band[T Integer]() Op[T] { return builtin[T]("band", KBand, bandFn[T]) }

// Bor is MPI_BOR, bitwise or.
func Bor[T Integer]() Op[T] { return builtin[T]("bor", KBor, borFn[T]) }

// Bxor is MPI_BXOR, bitwise exclusive or.
func Bxor[T Integer]() Op[T] { return builtin[T]("bxor", KBxor, bxorFn[T]) }

// Land is MPI_LAND: non-zero is true, and the result is 1 or 0.
func Land[T Number]() Op[T] { return builtin[T]("land", KLand, landFn[T]) }

// Lor is MPI_LOR: non-zero is true, and the result is 1 or 0.
func Lor[T Number]() Op[T] { return builtin[T]("lor", KLor, lorFn[T]) }

// Lxor is MPI_LXOR: non-zero is true, and the result is 1 or 0.
func Lxor[T Number]() Op[T] { return builtin[T]("lxor", KLxor, lxorFn[T]) }

// Loc is a value with the index it came from, for MinLoc and MaxLoc (MPI's
// pair types such as MPI_DOUBLE_INT).
type Loc[T Number] struct {
	Value T
	Index int32
}

// MinLoc is MPI_MINLOC: the smallest value, and on ties the smallest index.
func MinLoc[T Number]() Op[Loc[T]] { return builtin[Loc[T]]("minloc", KMinLoc, minLocFn[T]) }

// MaxLoc is MPI_MAXLOC: the largest value, and on ties the smallest index.
func MaxLoc[T Number]() Op[Loc[T]] { return builtin[Loc[T]]("maxloc", KMaxLoc, maxLocFn[T]) }

// NewOp makes a user-defined operation: fn sets inout[i] = in[i] ⊕
// inout[i], where in holds the lower ranks' operand. A non-commutative
// op is applied in rank order.
func NewOp[T any](name string, commutative bool, fn func(in, inout []T)) Op[T] {
	o := builtin[T](name, User, fn)
	o.u.Commutative = commutative
	return o
}

// Replace is MPI_REPLACE: the target takes the origin's value. Only
// one-sided accumulates take it.
func Replace[T any]() Op[T] {
	return Op[T]{Untyped{Name: "replace", Kind: KReplace, Commutative: false, Fn: func(in, inout []byte) { copy(inout, in) }, Elem: reflect.TypeFor[T]().Kind()}}
}

// NoOp is MPI_NO_OP: the target keeps its value (an atomic read). Only
// one-sided accumulates take it.
func NoOp[T any]() Op[T] {
	return Op[T]{Untyped{Name: "no_op", Kind: KNoOp, Commutative: true, Fn: func(in, inout []byte) {}, Elem: reflect.TypeFor[T]().Kind()}}
}

func sumFn[T Number | ~complex64 | ~complex128](in, inout []T) {
	for i := range inout {
		inout[i] = in[i] + inout[i]
	}
}

func prodFn[T Number | ~complex64 | ~complex128](in, inout []T) {
	for i := range inout {
		inout[i] = in[i] * inout[i]
	}
}

func minFn[T Number](in, inout []T) {
	for i := range inout {
		inout[i] = min(in[i], inout[i])
	}
}

func maxFn[T Number](in, inout []T) {
	for i := range inout {
		inout[i] = max(in[i], inout[i])
	}
}

func bandFn[T Integer](in, inout []T) {
	for i := range inout {
		inout[i] &= in[i]
	}
}

func borFn[T Integer](in, inout []T) {
	for i := range inout {
		inout[i] |= in[i]
	}
}

func bxorFn[T Integer](in, inout []T) {
	for i := range inout {
		inout[i] ^= in[i]
	}
}

func truth[T Number](b bool) T {
	if b {
		return 1
	}
	return 0
}

func landFn[T Number](in, inout []T) {
	for i := range inout {
		inout[i] = truth[T](in[i] != 0 && inout[i] != 0)
	}
}

func lorFn[T Number](in, inout []T) {
	for i := range inout {
		inout[i] = truth[T](in[i] != 0 || inout[i] != 0)
	}
}

func lxorFn[T Number](in, inout []T) {
	for i := range inout {
		inout[i] = truth[T]((in[i] != 0) != (inout[i] != 0))
	}
}

func minLocFn[T Number](in, inout []Loc[T]) {
	for i := range inout {
		a, b := in[i], inout[i]
		if a.Value < b.Value || (a.Value == b.Value && a.Index < b.Index) {
			inout[i] = a
		}
	}
}

func maxLocFn[T Number](in, inout []Loc[T]) {
	for i := range inout {
		a, b := in[i], inout[i]
		if a.Value > b.Value || (a.Value == b.Value && a.Index < b.Index) {
			inout[i] = a
		}
	}
}
