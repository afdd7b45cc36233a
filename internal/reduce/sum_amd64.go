package reduce

// Packed-add kernels (sum_amd64.s): SSE2, part of every amd64 CPU, so no
// feature check. Each adds in to inout over the first len(inout) &^ 63
// bytes, in lanes of 8, 16, 32 or 64 bits, or float32 or float64 lanes;
// len(in) ≥ len(inout). Go does not vectorize the loops by itself.

//go:noescape
func sum8x64(in, inout []byte)

//go:noescape
func sum16x64(in, inout []byte)

//go:noescape
func sum32x64(in, inout []byte)

//go:noescape
func sum64x64(in, inout []byte)

//go:noescape
func sumF32x64(in, inout []byte)

//go:noescape
func sumF64x64(in, inout []byte)

const haveSumKernels = true
