//go:build linux

package uverbs

import "structs"

// The structs below mirror include/uapi/rdma/ib_user_verbs.h and
// rdma_user_rxe.h (Linux 6.1). Every size is pinned by abi_test.go against
// the pahole dump in testdata/verbs-abi-sizes.txt. A request that has
// a response starts with Response, the user address the kernel writes to.

// Command numbers (enum ib_uverbs_write_cmds).
const (
	CmdAllocPD           = 3
	CmdDeallocPD         = 4
	CmdRegMR             = 9
	CmdDeregMR           = 13
	CmdCreateCompChannel = 17
	CmdCreateCQ          = 18
	CmdDestroyCQ         = 20
	CmdReqNotifyCQ       = 23
	CmdCreateQP          = 24
	CmdQueryQP           = 25
	CmdModifyQP          = 26
	CmdDestroyQP         = 27
	CmdPostSend          = 28
	CmdCreateSRQ         = 32
	CmdDestroySRQ        = 35
)

// QueryDeviceResp is struct ib_uverbs_query_device_resp (176 bytes).
type QueryDeviceResp struct {
	_                structs.HostLayout
	FWVer            uint64
	NodeGUID         uint64 // big-endian
	SysImageGUID     uint64
	MaxMRSize        uint64
	PageSizeCap      uint64
	VendorID         uint32
	VendorPartID     uint32
	HWVer            uint32
	MaxQP            uint32
	MaxQPWR          uint32
	DeviceCapFlags   uint32
	MaxSGE           uint32
	MaxSGERD         uint32
	MaxCQ            uint32
	MaxCQE           uint32
	MaxMR            uint32
	MaxPD            uint32
	MaxQPRdAtom      uint32
	MaxEERdAtom      uint32
	MaxResRdAtom     uint32
	MaxQPInitRdAtom  uint32
	MaxEEInitRdAtom  uint32
	AtomicCap        uint32
	MaxEE            uint32
	MaxRDD           uint32
	MaxMW            uint32
	MaxRawIPv6QP     uint32
	MaxRawEthyQP     uint32
	MaxMcastGrp      uint32
	MaxMcastQPAttach uint32
	MaxTotalMcastQP  uint32
	MaxAH            uint32
	MaxFMR           uint32
	MaxMapPerFMR     uint32
	MaxSRQ           uint32
	MaxSRQWR         uint32
	MaxSRQSGE        uint32
	MaxPkeys         uint16
	LocalCAAckDelay  uint8
	PhysPortCnt      uint8
	_                [4]byte
}

type respOnly struct {
	_        structs.HostLayout
	Response uint64
}

type queryPort struct {
	_        structs.HostLayout
	Response uint64
	PortNum  uint8
	_        [7]byte
}

type handleOnly struct {
	_      structs.HostLayout
	Handle uint32
}

type regMR struct {
	_           structs.HostLayout
	Response    uint64
	Start       uint64
	Length      uint64
	HCAVA       uint64
	PDHandle    uint32
	AccessFlags uint32
}

// RegMRResp is struct ib_uverbs_reg_mr_resp.
type RegMRResp struct {
	_        structs.HostLayout
	MRHandle uint32
	LKey     uint32
	RKey     uint32
}

type createCQ struct {
	_           structs.HostLayout
	Response    uint64
	UserHandle  uint64
	CQE         uint32
	CompVector  uint32
	CompChannel int32
	_           uint32
}

// MMInfo is rxe's struct mminfo: where to mmap a ring on the uverbs fd.
type MMInfo struct {
	_      structs.HostLayout
	Offset uint64
	Size   uint32
	_      uint32
}

// CreateCQResp is ib_uverbs_create_cq_resp followed by rxe_create_cq_resp.
type CreateCQResp struct {
	_        structs.HostLayout
	CQHandle uint32
	CQE      uint32
	MI       MMInfo
}

type reqNotifyCQ struct {
	_             structs.HostLayout
	CQHandle      uint32
	SolicitedOnly uint32
}

type destroy struct {
	_        structs.HostLayout
	Response uint64
	Handle   uint32
	_        uint32
}

// DestroyCQResp is struct ib_uverbs_destroy_cq_resp.
type DestroyCQResp struct {
	_                   structs.HostLayout
	CompEventsReported  uint32
	AsyncEventsReported uint32
}

// CreateQP is struct ib_uverbs_create_qp less its response pointer.
type CreateQP struct {
	_             structs.HostLayout
	Response      uint64
	UserHandle    uint64
	PDHandle      uint32
	SendCQHandle  uint32
	RecvCQHandle  uint32
	SRQHandle     uint32
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
	SQSigAll      uint8
	QPType        uint8
	IsSRQ         uint8
	_             uint8
}

// CreateSRQ is struct ib_uverbs_create_srq, with no driver data (rxe
// reads none).
type CreateSRQ struct {
	_          structs.HostLayout
	Response   uint64
	UserHandle uint64
	PDHandle   uint32
	MaxWR      uint32
	MaxSGE     uint32
	SRQLimit   uint32
}

// CreateSRQResp is ib_uverbs_create_srq_resp followed by
// rxe_create_srq_resp: the ring to map, and the SRQ's number.
type CreateSRQResp struct {
	_         structs.HostLayout
	SRQHandle uint32
	MaxWR     uint32
	MaxSGE    uint32
	SRQN      uint32
	MI        MMInfo
	SRQNum    uint32
	_         uint32
}

// CreateQPResp is ib_uverbs_create_qp_resp followed by rxe_create_qp_resp
// (the RQ's mminfo first).
type CreateQPResp struct {
	_             structs.HostLayout
	QPHandle      uint32
	QPN           uint32
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
	_             uint32
	RQ            MMInfo
	SQ            MMInfo
}

// QPDest is struct ib_uverbs_qp_dest: a path (address vector).
type QPDest struct {
	_            structs.HostLayout
	DGID         [16]byte
	FlowLabel    uint32
	DLID         uint16
	_            uint16
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	SL           uint8
	SrcPathBits  uint8
	StaticRate   uint8
	IsGlobal     uint8
	PortNum      uint8
}

// ModifyQP is struct ib_uverbs_modify_qp.
type ModifyQP struct {
	_                structs.HostLayout
	Dest             QPDest
	AltDest          QPDest
	QPHandle         uint32
	AttrMask         uint32
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPNum        uint32
	QPAccessFlags    uint32
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	QPState          uint8
	CurQPState       uint8
	PathMTU          uint8
	PathMigState     uint8
	EnSQDAsyncNotify uint8
	MaxRdAtomic      uint8
	MaxDestRdAtomic  uint8
	MinRNRTimer      uint8
	PortNum          uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	AltPortNum       uint8
	AltTimeout       uint8
	_                [2]byte
}

type queryQP struct {
	_        structs.HostLayout
	Response uint64
	QPHandle uint32
	AttrMask uint32
}

// QueryQPResp is struct ib_uverbs_query_qp_resp.
type QueryQPResp struct {
	_               structs.HostLayout
	Dest            QPDest
	AltDest         QPDest
	MaxSendWR       uint32
	MaxRecvWR       uint32
	MaxSendSGE      uint32
	MaxRecvSGE      uint32
	MaxInlineData   uint32
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPNum       uint32
	QPAccessFlags   uint32
	PKeyIndex       uint16
	AltPKeyIndex    uint16
	QPState         uint8
	CurQPState      uint8
	PathMTU         uint8
	PathMigState    uint8
	SQDraining      uint8
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	PortNum         uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	AltPortNum      uint8
	AltTimeout      uint8
	SQSigAll        uint8
	_               [5]byte
}

// postSend is struct ib_uverbs_post_send; rxe's doorbell sends it with no
// work requests.
type postSend struct {
	_        structs.HostLayout
	Response uint64
	QPHandle uint32
	WRCount  uint32
	SGECount uint32
	WQESize  uint32
}

// WC is struct ib_uverbs_wc, as rxe writes it into CQ ring slots.
type WC struct {
	_            structs.HostLayout
	WRID         uint64
	Status       uint32
	Opcode       uint32
	VendorErr    uint32
	ByteLen      uint32
	ImmData      uint32 // big-endian on the wire; also invalidate_rkey
	QPNum        uint32
	SrcQP        uint32
	WCFlags      uint32
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	PortNum      uint8
	_            uint8
}

// AsyncEventDesc is struct ib_uverbs_async_event_desc, read from the async fd.
type AsyncEventDesc struct {
	_         structs.HostLayout
	Element   uint64 // the CQ/QP user_handle, or the port number
	EventType uint32
	_         uint32
}

// QP attribute mask bits (enum ib_qp_attr_mask).
const (
	QPState         = 1 << 0
	QPAccessFlags   = 1 << 3
	QPPKeyIndex     = 1 << 4
	QPPort          = 1 << 5
	QPAV            = 1 << 7
	QPPathMTU       = 1 << 8
	QPTimeout       = 1 << 9
	QPRetryCnt      = 1 << 10
	QPRNRRetry      = 1 << 11
	QPRQPSN         = 1 << 12
	QPMaxQPRdAtomic = 1 << 13
	QPMinRNRTimer   = 1 << 15
	QPSQPSN         = 1 << 16
	QPMaxDestRdAtom = 1 << 17
	QPCap           = 1 << 19
	QPDestQPN       = 1 << 20
)
