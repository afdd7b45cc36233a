package uverbs

import (
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Context is an open uverbs device with its user context allocated
// (GET_CONTEXT), which every other command requires.
type Context struct {
	FD             int // the uverbs character device
	AsyncFD        int // async events (ib_uverbs_async_event_desc records)
	NumCompVectors uint32
	closeOnce      sync.Once
	closeErr       error
}

// Open opens a uverbs character device such as /dev/infiniband/uverbs0 and
// allocates its user context.
func Open(path string) (*Context, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	resp := make([]byte, 8) // ib_uverbs_get_context_resp
	if err := write(fd, "GET_CONTEXT", CmdGetContext, make([]byte, 8), resp); err != nil {
		unix.Close(fd)
		return nil, err
	}
	c := &Context{
		FD:             fd,
		AsyncFD:        int(binary.NativeEndian.Uint32(resp[0:])),
		NumCompVectors: binary.NativeEndian.Uint32(resp[4:]),
	}
	unix.CloseOnExec(c.AsyncFD)
	return c, nil
}

// Close releases the context; it is safe to call more than once.
func (c *Context) Close() error {
	c.closeOnce.Do(func() {
		e1 := unix.Close(c.AsyncFD)
		e2 := unix.Close(c.FD)
		if e1 != nil {
			c.closeErr = e1
		} else {
			c.closeErr = e2
		}
	})
	return c.closeErr
}

// PortAttr is struct ib_uverbs_query_port_resp (40 bytes).
type PortAttr struct {
	PortCapFlags  uint32
	MaxMsgSize    uint32
	BadPkeyCntr   uint32
	QkeyViolCntr  uint32
	GIDTableLen   uint32
	PkeyTableLen  uint16
	LID           uint16
	SMLID         uint16
	State         uint8
	MaxMTU        uint8
	ActiveMTU     uint8
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8
	ActiveSpeed   uint8
	PhysState     uint8
	LinkLayer     uint8
	Flags         uint8
	_             uint8
}

// QueryPort is QUERY_PORT for port (1-based).
func (c *Context) QueryPort(port uint8) (PortAttr, error) {
	req := make([]byte, 16) // response u64, port_num u8, reserved[7]
	req[8] = port
	resp := make([]byte, 40)
	if err := write(c.FD, "QUERY_PORT", CmdQueryPort, req, resp); err != nil {
		return PortAttr{}, err
	}
	var a PortAttr
	if _, err := binary.Decode(resp, binary.NativeEndian, &a); err != nil {
		return PortAttr{}, err
	}
	return a, nil
}
