//go:build !amd64

package collectives

// Without packed-add kernels the sums run in Go (op.go).

func sum8x64(in, inout []byte)   {}
func sum16x64(in, inout []byte)  {}
func sum32x64(in, inout []byte)  {}
func sum64x64(in, inout []byte)  {}
func sumF32x64(in, inout []byte) {}
func sumF64x64(in, inout []byte) {}

const haveSumKernels = false
