package collectives

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"
)

// Op is a reduction operation over elements of one type (MPI_Op). Build
// one with the built-ins — Sum, Prod, Min, Max, Band, Bor, Bxor, Land,
// Lor, Lxor, MinLoc, MaxLoc — or NewOp. Ops are values; building one
// allocates nothing (NewOp once).
type Op struct {
	name        string
	commutative bool
	elem        reflect.Type
	// fn sets inout[i] = in[i] ⊕ inout[i], in holding the operand of
	// the lower ranks — MPI's convention for user functions.
	fn func(in, inout []byte)
}

// Name is the operation's name ("sum", "minloc", or NewOp's).
func (o Op) Name() string { return o.name }

// Commutative reports whether operand order does not matter; a
// non-commutative Op is applied in rank order.
func (o Op) Commutative() bool { return o.commutative }

// ErrOp is returned for a missing Op or one built for another element type.
var ErrOp = errors.New("collectives: invalid reduction operation")

func checkOp[T any](o Op) error {
	if o.fn == nil {
		return fmt.Errorf("%w: none given", ErrOp)
	}
	if t := reflect.TypeFor[T](); o.elem != t {
		return fmt.Errorf("%w: %s is for %v, the buffers hold %v", ErrOp, o.name, o.elem, t)
	}
	return nil
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

func builtin[T any](name string, fn func(in, inout []T)) Op {
	return Op{name: name, commutative: true, elem: reflect.TypeFor[T](), fn: func(in, inout []byte) { fn(view[T](in), view[T](inout)) }}
}

// Sum is MPI_SUM.
func Sum[T Number | ~complex64 | ~complex128]() Op {
	if fn := packedSum[T](); fn != nil {
		return Op{name: "sum", commutative: true, elem: reflect.TypeFor[T](), fn: fn}
	}
	return builtin[T]("sum", sumFn[T])
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
func Prod[T Number | ~complex64 | ~complex128]() Op { return builtin[T]("prod", prodFn[T]) }

// Min is MPI_MIN.
func Min[T Number]() Op { return builtin[T]("min", minFn[T]) }

// Max is MPI_MAX.
func Max[T Number]() Op { return builtin[T]("max", maxFn[T]) }

// Band is MPI_BAND, bitwise and.
func Band[T Integer]() Op { return builtin[T]("band", bandFn[T]) }

// Bor is MPI_BOR, bitwise or.
func Bor[T Integer]() Op { return builtin[T]("bor", borFn[T]) }

// Bxor is MPI_BXOR, bitwise exclusive or.
func Bxor[T Integer]() Op { return builtin[T]("bxor", bxorFn[T]) }

// Land is MPI_LAND: non-zero is true, and the result is 1 or 0.
func Land[T Number]() Op { return builtin[T]("land", landFn[T]) }

// Lor is MPI_LOR: non-zero is true, and the result is 1 or 0.
func Lor[T Number]() Op { return builtin[T]("lor", lorFn[T]) }

// Lxor is MPI_LXOR: non-zero is true, and the result is 1 or 0.
func Lxor[T Number]() Op { return builtin[T]("lxor", lxorFn[T]) }

// Loc is a value with the index it came from, for MinLoc and MaxLoc (MPI's
// pair types such as MPI_DOUBLE_INT).
type Loc[T Number] struct {
	Value T
	Index int32
}

// MinLoc is MPI_MINLOC: the smallest value, and on ties the smallest index.
func MinLoc[T Number]() Op { return builtin[Loc[T]]("minloc", minLocFn[T]) }

// MaxLoc is MPI_MAXLOC: the largest value, and on ties the smallest index.
func MaxLoc[T Number]() Op { return builtin[Loc[T]]("maxloc", maxLocFn[T]) }

// NewOp makes a user-defined operation: fn sets inout[i] = in[i] ⊕
// inout[i], where in holds the lower ranks' operand. A non-commutative
// op is applied in rank order.
func NewOp[T any](name string, commutative bool, fn func(in, inout []T)) Op {
	o := builtin[T](name, fn)
	o.commutative = commutative
	return o
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
