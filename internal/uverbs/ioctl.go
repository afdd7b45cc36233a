//go:build linux

package uverbs

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ioctl transport (include/uapi/rdma/rdma_user_ioctl_cmds.h): a header
// naming an object and a method, then attributes, each an inline value or
// a pointer to user memory. Rivet issues one method this way, the GID
// table query; everything else goes through write().
const (
	ioctlVerbs = 0xC0181B01 // RDMA_VERBS_IOCTL = _IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)

	attrMandatory = 1 // UVERBS_ATTR_F_MANDATORY: fail if the kernel does not know the attribute

	objectDevice        = 0 // UVERBS_OBJECT_DEVICE
	methodQueryGIDTable = 5 // UVERBS_METHOD_QUERY_GID_TABLE

	// UVERBS_ATTR_QUERY_GID_TABLE_*
	attrGIDEntrySize  = 0
	attrGIDEntries    = 2
	attrGIDNumEntries = 3
)

// DriverRXE is soft-RoCE's RDMA_DRIVER_ID; an ioctl must carry the driver id
// of the device it goes to, or the kernel answers EINVAL.
const DriverRXE = 14

// ioctlHdr is struct ib_uverbs_ioctl_hdr.
type ioctlHdr struct {
	Length    uint16 // header and attributes, bytes
	ObjectID  uint16
	MethodID  uint16
	NumAttrs  uint16
	Reserved1 uint64
	DriverID  uint32
	Reserved2 uint32
}

// ioctlAttr is struct ib_uverbs_attr. Data is the value itself when Len is
// at most 8 and the attribute is an input, else a user pointer.
type ioctlAttr struct {
	AttrID   uint16
	Len      uint16
	Flags    uint16 // the kernel sets UVERBS_ATTR_F_VALID_OUTPUT on outputs it wrote
	AttrData uint16
	Data     uint64
}

// GIDEntry is struct ib_uverbs_gid_entry: one valid entry of a port's GID
// table.
type GIDEntry struct {
	GID           [16]byte
	GIDIndex      uint32
	PortNum       uint32
	GIDType       uint32 // IB_UVERBS_GID_TYPE_IB 0, ROCE_V1 1, ROCE_V2 2
	NetdevIfindex uint32 // 0 if the entry has no netdev
}

// GID types as QUERY_GID_TABLE reports them.
const (
	GIDTypeIB     = 0
	GIDTypeRoCEv1 = 1
	GIDTypeRoCEv2 = 2
)

// QueryGIDTable returns the valid entries of every port's GID table in one
// call (Linux 5.10+). max bounds the answer and must be at least the number
// of valid entries: the sum of the ports' table lengths always is. driverID
// is the device's RDMA_DRIVER_ID.
func (c *Context) QueryGIDTable(driverID uint32, max int) ([]GIDEntry, error) {
	const name = "QUERY_GID_TABLE"
	entrySize := int(unsafe.Sizeof(GIDEntry{}))
	if max <= 0 {
		return nil, fmt.Errorf("uverbs %s: bad table bound %d", name, max)
	}
	// An attribute's length is 16 bits: 2047 entries at most per call.
	max = min(max, 0xffff/entrySize)
	// The kernel writes the entries into memory Go does not manage.
	buf, err := unix.Mmap(-1, 0, max*entrySize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("uverbs %s: mmap: %w", name, err)
	}
	defer unix.Munmap(buf)

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("uverbs %s: %w", name, ErrClosed)
	}
	// The header, its attributes and the entry count live in scratch: the
	// kernel writes to all three.
	const nattrs = 3
	hdrLen := int(unsafe.Sizeof(ioctlHdr{})) + nattrs*int(unsafe.Sizeof(ioctlAttr{}))
	clear(c.scratch[:hdrLen+8])
	hdr := (*ioctlHdr)(unsafe.Pointer(&c.scratch[0]))
	*hdr = ioctlHdr{Length: uint16(hdrLen), ObjectID: objectDevice, MethodID: methodQueryGIDTable,
		NumAttrs: nattrs, DriverID: driverID}
	count := (*uint64)(unsafe.Pointer(&c.scratch[hdrLen]))
	attrs := (*[nattrs]ioctlAttr)(unsafe.Pointer(&c.scratch[unsafe.Sizeof(ioctlHdr{})]))
	attrs[0] = ioctlAttr{AttrID: attrGIDEntrySize, Len: 8, Flags: attrMandatory, Data: uint64(entrySize)}
	attrs[1] = ioctlAttr{AttrID: attrGIDEntries, Len: uint16(len(buf)), Flags: attrMandatory,
		Data: uint64(uintptr(unsafe.Pointer(&buf[0])))}
	attrs[2] = ioctlAttr{AttrID: attrGIDNumEntries, Len: 8, Flags: attrMandatory,
		Data: uint64(uintptr(unsafe.Pointer(count)))}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(c.FD), ioctlVerbs, uintptr(unsafe.Pointer(hdr))); errno != 0 {
		return nil, &Errno{name, errno}
	}
	n := int(*count)
	if n > max {
		return nil, fmt.Errorf("uverbs %s: %d entries in a %d-entry answer", name, n, max)
	}
	out := make([]GIDEntry, n)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), n*entrySize), buf)
	return out, nil
}
