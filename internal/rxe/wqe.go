package rxe

import (
	"structs"
	"unsafe"
)

// SendWQEHeader is the fixed part of struct rxe_send_wqe (208 bytes); the
// SGE list or inline data follows it in the slot. The kernel works on the
// WQE in place (status, state, PSNs) until it passes the slot.
type SendWQEHeader struct {
	_          structs.HostLayout
	WRID       uint64
	_          uint32
	Opcode     uint32
	SendFlags  uint32
	ImmData    uint32 // big-endian
	RemoteAddr uint64 // rdma and atomic
	RKeyOrCmp  uint64 // rdma: rkey in the low 32 bits; atomic: compare_add
	Swap       uint64 // atomic
	AtomicRKey uint32 // atomic
	_          [144 - 52]byte
	Status     uint32
	State      uint32
	IOVA       uint64
	Mask       uint32
	FirstPSN   uint32
	LastPSN    uint32
	AckLength  uint32
	SSN        uint32
	HasRdAtom  uint32
	DMA        DMAInfo
}

// DMAInfo is struct rxe_dma_info without its trailing SGE/inline array.
type DMAInfo struct {
	_         structs.HostLayout
	Length    uint32
	Resid     uint32
	CurSGE    uint32
	NumSGE    uint32
	SGEOffset uint32
	_         uint32
}

// RecvWQEHeader is struct rxe_recv_wqe (40 bytes) without its SGE array.
type RecvWQEHeader struct {
	_    structs.HostLayout
	WRID uint64
	_    uint32
	_    uint32
	DMA  DMAInfo
}

// SGE is struct ib_uverbs_sge / rxe_sge.
type SGE struct {
	_      structs.HostLayout
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Sizes of the fixed parts.
const (
	SendWQEHeaderSize = int(unsafe.Sizeof(SendWQEHeader{}))
	RecvWQEHeaderSize = int(unsafe.Sizeof(RecvWQEHeader{}))
	SGESize           = int(unsafe.Sizeof(SGE{}))
)

// Work request opcodes (enum ib_uverbs_wr_opcode).
const (
	OpRDMAWrite        = 0
	OpRDMAWriteWithImm = 1
	OpSend             = 2
	OpSendWithImm      = 3
	OpRDMARead         = 4
	OpCompareSwap      = 5
	OpFetchAdd         = 6
)

// Send flags (enum ib_uverbs_send_flags).
const (
	FlagFence     = 1
	FlagSignaled  = 2
	FlagSolicited = 4
	FlagInline    = 8
)
