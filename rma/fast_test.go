//go:build linux

package rma

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// laneAdd must equal element-wise wrapping addition for every lane size.
func TestLaneAdd(t *testing.T) {
	ne := binary.NativeEndian
	for i := 0; i < 100000; i++ {
		a, b := rand.Uint64(), rand.Uint64()
		if i%7 == 0 {
			a, b = ^uint64(0), 1 // every lane carries
		}
		for _, esz := range []int{1, 2, 4, 8} {
			var x, y, want [8]byte
			ne.PutUint64(x[:], a)
			ne.PutUint64(y[:], b)
			for l := 0; l < 8; l += esz {
				var s, c uint64
				for k := 0; k < esz; k++ { // little-endian lanes, byte-wise with carry
					s = uint64(x[l+k]) + uint64(y[l+k]) + c
					want[l+k], c = byte(s), s>>8
				}
			}
			if got := laneAdd(a, b, esz); got != ne.Uint64(want[:]) {
				t.Fatalf("laneAdd(%#x, %#x, %d) = %#x, want %#x", a, b, esz, got, ne.Uint64(want[:]))
			}
		}
	}
}
