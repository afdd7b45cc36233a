//go:build linux

package uverbs

import "unsafe"

// ringWrite is write(2) as a raw system call (doorbell_amd64.s).
//
//go:noescape
func ringWrite(fd int, p unsafe.Pointer, n int) (r int, errno uintptr)
