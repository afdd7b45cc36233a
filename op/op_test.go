package op_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rivet-hpc/rivet/op"
)

func TestReduce(t *testing.T) {
	for _, tc := range []struct {
		o    op.Op[int32]
		want []int32
	}{
		{op.Sum[int32](), []int32{11, 22, 33}},
		{op.Max[int32](), []int32{10, 20, 30}},
		{op.Replace[int32](), []int32{10, 20, 30}},
		{op.NoOp[int32](), []int32{1, 2, 3}},
		{op.New("second", false, func(in, inout []int32) {
			for i := range inout {
				inout[i] = inout[i]*100 + in[i]
			}
		}), []int32{110, 220, 330}},
		{op.Op[int32]{}, []int32{1, 2, 3}},
	} {
		got := []int32{1, 2, 3}
		tc.o.Reduce([]int32{10, 20, 30}, got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.o.Name(), got, tc.want)
		}
	}
	if op.Replace[byte]().Commutative() || !op.Sum[byte]().Commutative() {
		t.Error("Replace is not commutative; Sum is")
	}
}

func ExampleOp_Reduce() {
	acc := []float64{1, 2}
	op.Sum[float64]().Reduce([]float64{0.5, 0.25}, acc)
	fmt.Println(acc)
	// Output: [1.5 2.25]
}
