// Package uverbs holds the kernel's uverbs ABI: command numbers, the write()
// framing of /dev/infiniband/uverbsN and one typed wrapper per command. It
// mirrors include/uapi/rdma/ib_user_verbs.h (Linux 6.1); users never see it.
package uverbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Command numbers (enum ib_uverbs_write_cmds).
const (
	CmdGetContext  = 0
	CmdQueryDevice = 1
	CmdQueryPort   = 2
)

// Errno is a failed uverbs command. It wraps the errno so callers test it
// with errors.Is(err, unix.EINVAL) and never compare it with ==.
type Errno struct {
	Cmd   string
	Errno unix.Errno
}

func (e *Errno) Error() string { return fmt.Sprintf("uverbs %s: %v", e.Cmd, e.Errno) }

// Unwrap returns the errno.
func (e *Errno) Unwrap() error { return e.Errno }

// write issues one legacy write() command: an 8-byte ib_uverbs_cmd_hdr, then
// req. When resp is non-empty, the first 8 bytes of req are overwritten with
// its address (every such request starts with __aligned_u64 response).
// resp must be heap memory: the kernel writes it during the call.
func write(fd int, name string, cmd uint32, req, resp []byte) error {
	if (8+len(req))%4 != 0 || len(resp)%4 != 0 {
		return fmt.Errorf("uverbs %s: request or response not a multiple of 4 bytes", name)
	}
	buf := make([]byte, 8+len(req))
	binary.NativeEndian.PutUint32(buf[0:], cmd)
	binary.NativeEndian.PutUint16(buf[4:], uint16(len(buf)/4))
	binary.NativeEndian.PutUint16(buf[6:], uint16(len(resp)/4))
	copy(buf[8:], req)
	if len(resp) > 0 {
		binary.NativeEndian.PutUint64(buf[8:], uint64(uintptr(unsafe.Pointer(&resp[0]))))
	}
	n, err := unix.Write(fd, buf)
	runtime.KeepAlive(resp)
	var errno unix.Errno
	switch {
	case errors.As(err, &errno):
		return &Errno{name, errno}
	case err != nil:
		return fmt.Errorf("uverbs %s: %w", name, err)
	case n != len(buf):
		return fmt.Errorf("uverbs %s: short write %d of %d", name, n, len(buf))
	}
	return nil
}
