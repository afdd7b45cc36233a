// Package op names the reduction operations (MPI_Op) that collectives'
// reductions and rma's accumulates take: the built-ins, MPI_REPLACE and
// MPI_NO_OP for one-sided accumulates, and user-defined operations. An
// Op is typed by its element, so a wrong element type fails to compile
// rather than at run time.
package op

import "github.com/rivet-hpc/rivet/internal/reduce"

// Op is a reduction operation over elements of type T (MPI_Op). Build one
// with the built-ins — Sum, Prod, Min, Max, Band, Bor, Bxor, Land, Lor,
// Lxor, MinLoc, MaxLoc, and for one-sided accumulates Replace and NoOp —
// or New. Ops are values; building a built-in allocates nothing. The
// zero Op is no operation, and calls that take one reject it.
//
// Methods: Name, Commutative, and Reduce(in, inout []T), which applies
// the operation locally (inout[i] = in[i] ⊕ inout[i]).
type Op[T any] = reduce.Op[T]

// ErrOp is returned for a missing Op, or one a call cannot take (such as
// Replace in a collective).
var ErrOp = reduce.ErrOp

// Integer, Float and Number are the element types of the built-in
// operations.
type (
	Integer = reduce.Integer
	Float   = reduce.Float
	Number  = reduce.Number
)

// Loc is a value with the index it came from, for MinLoc and MaxLoc (MPI's
// pair types such as MPI_DOUBLE_INT).
type Loc[T Number] = reduce.Loc[T]

// Sum is MPI_SUM. Integers wrap.
func Sum[T Number | ~complex64 | ~complex128]() Op[T] { return reduce.Sum[T]() }

// Prod is MPI_PROD.
func Prod[T Number | ~complex64 | ~complex128]() Op[T] { return reduce.Prod[T]() }

// Min is MPI_MIN.
func Min[T Number]() Op[T] { return reduce.Min[T]() }

// Max is MPI_MAX.
func Max[T Number]() Op[T] { return reduce.Max[T]() }

// Band is MPI_BAND, bitwise and.
func Band[T Integer]() Op[T] { return reduce.Band[T]() }

// Bor is MPI_BOR, bitwise or.
func Bor[T Integer]() Op[T] { return reduce.Bor[T]() }

// Bxor is MPI_BXOR, bitwise exclusive or.
func Bxor[T Integer]() Op[T] { return reduce.Bxor[T]() }

// Land is MPI_LAND: non-zero is true, and the result is 1 or 0.
func Land[T Number]() Op[T] { return reduce.Land[T]() }

// Lor is MPI_LOR: non-zero is true, and the result is 1 or 0.
func Lor[T Number]() Op[T] { return reduce.Lor[T]() }

// Lxor is MPI_LXOR: non-zero is true, and the result is 1 or 0.
func Lxor[T Number]() Op[T] { return reduce.Lxor[T]() }

// MinLoc is MPI_MINLOC: the smallest value, and on ties the smallest index.
func MinLoc[T Number]() Op[Loc[T]] { return reduce.MinLoc[T]() }

// MaxLoc is MPI_MAXLOC: the largest value, and on ties the smallest index.
func MaxLoc[T Number]() Op[Loc[T]] { return reduce.MaxLoc[T]() }

// Replace is MPI_REPLACE: the target element takes the origin's value.
// Only one-sided accumulates take it.
func Replace[T any]() Op[T] { return reduce.Replace[T]() }

// NoOp is MPI_NO_OP: the target element keeps its value, which makes
// GetAccumulate an atomic read. Only one-sided accumulates take it.
func NoOp[T any]() Op[T] { return reduce.NoOp[T]() }

// New makes a user-defined operation (MPI_Op_create): fn sets inout[i] =
// in[i] ⊕ inout[i], where in holds the lower ranks' operand. A
// non-commutative op is applied in rank order. Build it once: New
// allocates.
func New[T any](name string, commutative bool, fn func(in, inout []T)) Op[T] {
	return reduce.NewOp(name, commutative, fn)
}
