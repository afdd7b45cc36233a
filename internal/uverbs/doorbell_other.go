//go:build linux && !amd64

package uverbs

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// ringWrite is write(2) as a raw system call.
func ringWrite(fd int, p unsafe.Pointer, n int) (int, uintptr) {
	r, _, errno := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(p), uintptr(n))
	return int(r), uintptr(errno)
}
