//go:build !amd64

package reduce

// Without packed-add kernels the sums run in Go (op.go), which checks
// haveSumKernels and never calls these.

const haveSumKernels = false

func sum8x64(in, inout []byte)   { noKernels() }
func sum16x64(in, inout []byte)  { noKernels() }
func sum32x64(in, inout []byte)  { noKernels() }
func sum64x64(in, inout []byte)  { noKernels() }
func sumF32x64(in, inout []byte) { noKernels() }
func sumF64x64(in, inout []byte) { noKernels() }

func noKernels() { panic("reduce: packed-add kernel called on an architecture without them") }
