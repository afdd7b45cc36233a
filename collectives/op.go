//go:build linux

package collectives

import (
	"fmt"

	"github.com/rivet-hpc/rivet/internal/reduce"
	"github.com/rivet-hpc/rivet/op"
)

// collOp returns o's untyped form, or an error for the zero Op and for
// the one-sided operations (Replace, NoOp), which MPI's reductions do
// not take.
func collOp[T any](o op.Op[T]) (reduce.Untyped, error) {
	u, err := reduce.Check(o)
	if err != nil {
		return u, err
	}
	if u.Kind == reduce.KReplace || u.Kind == reduce.KNoOp {
		return reduce.Untyped{}, fmt.Errorf("%w: %s is for one-sided accumulates, not reductions", op.ErrOp, u.Name)
	}
	return u, nil
}
