package reduce

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// TestSumKernels checks every packed Sum against the plain loop, over
// lengths around the 64-byte blocks and at unaligned addresses, with
// values that overflow (integers wrap) and floats of all signs.
func TestSumKernels(t *testing.T) {
	checkSum[int8](t, func(r *rand.Rand) int8 { return int8(r.Uint32()) })
	checkSum[uint8](t, func(r *rand.Rand) uint8 { return uint8(r.Uint32()) })
	checkSum[int16](t, func(r *rand.Rand) int16 { return int16(r.Uint32()) })
	checkSum[uint16](t, func(r *rand.Rand) uint16 { return uint16(r.Uint32()) })
	checkSum[int32](t, func(r *rand.Rand) int32 { return int32(r.Uint32()) })
	checkSum[uint32](t, func(r *rand.Rand) uint32 { return r.Uint32() })
	checkSum[int64](t, func(r *rand.Rand) int64 { return int64(r.Uint64()) })
	checkSum[uint64](t, func(r *rand.Rand) uint64 { return r.Uint64() })
	checkSum[int](t, func(r *rand.Rand) int { return int(r.Uint64()) })
	checkSum[uintptr](t, func(r *rand.Rand) uintptr { return uintptr(r.Uint64()) })
	checkSum[float32](t, func(r *rand.Rand) float32 { return float32(r.NormFloat64() * 1e3) })
	checkSum[float64](t, func(r *rand.Rand) float64 { return r.NormFloat64() * 1e300 })
}

func checkSum[T Number](t *testing.T, gen func(*rand.Rand) T) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	op := Erase(Sum[T]())
	var z T
	size := int(unsafe.Sizeof(z))
	for n := 0; n <= 3*64/size+2; n++ {
		for _, skew := range []int{0, 1, 3} {
			// Byte buffers offset by skew elements' worth of bytes plus
			// one, so the kernels meet unaligned memory.
			inB := make([]byte, (n+skew+2)*size+1)
			outB := make([]byte, (n+skew+2)*size+1)
			in := view[T](inB[1+skew*size:])[:n]
			out := view[T](outB[1:])[:n]
			want := make([]T, n)
			for i := range in {
				in[i], out[i] = gen(r), gen(r)
				want[i] = in[i] + out[i]
			}
			guard := view[T](outB[1+n*size:])[0]
			op.Fn(bytesOf(in), bytesOf(out))
			for i := range out {
				if out[i] != want[i] && !(math.IsNaN(float64(out[i])) && math.IsNaN(float64(want[i]))) {
					t.Fatalf("sum of %d %Ts (skew %d): element %d is %v, want %v", n, z, skew, i, out[i], want[i])
				}
			}
			if view[T](outB[1+n*size:])[0] != guard {
				t.Fatalf("sum of %d %Ts wrote past the end", n, z)
			}
		}
	}
}

// BenchmarkSum is the reduction's own speed, 512 KiB at a time (the half
// a 2-rank 1 MiB allreduce reduces).
func BenchmarkSum(b *testing.B) {
	for _, c := range []struct {
		name string
		op   Untyped
	}{{"byte", Erase(Sum[byte]())}, {"int32", Erase(Sum[int32]())}, {"float64", Erase(Sum[float64]())}} {
		b.Run(c.name, func(b *testing.B) {
			in, out := make([]byte, 512<<10), make([]byte, 512<<10)
			b.SetBytes(int64(len(out)))
			for b.Loop() {
				c.op.Fn(in, out)
			}
		})
	}
}

func TestSumBytes(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 64, 1000} {
		a, b := make([]byte, n), make([]byte, n)
		for i := range a {
			a[i], b[i] = byte(i*37+11), byte(i*91+200)
		}
		want := make([]byte, n)
		for i := range want {
			want[i] = a[i] + b[i]
		}
		Erase(Sum[byte]()).Fn(a, b)
		if !slices.Equal(b, want) {
			t.Fatalf("%d bytes: %v, want %v", n, b, want)
		}
		x, y := make([]int8, n), make([]int8, n)
		for i := range x {
			x[i], y[i] = int8(a[i]), int8(a[i]^0x5a)
		}
		wantI := make([]int8, n)
		for i := range wantI {
			wantI[i] = x[i] + y[i]
		}
		Sum[int8]().Reduce(x, y)
		if !slices.Equal(y, wantI) {
			t.Fatalf("%d int8: wrong", n)
		}
	}
}
