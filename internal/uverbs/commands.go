//go:build linux

package uverbs

import "structs"

// PortAttr is struct ib_uverbs_query_port_resp (40 bytes).
type PortAttr struct {
	_             structs.HostLayout
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

// QueryDevice is QUERY_DEVICE.
func (c *Context) QueryDevice() (QueryDeviceResp, error) {
	var r QueryDeviceResp
	return r, command(c, "QUERY_DEVICE", CmdQueryDevice, &respOnly{}, &r)
}

// QueryPort is QUERY_PORT for port (1-based).
func (c *Context) QueryPort(port uint8) (PortAttr, error) {
	var r PortAttr
	return r, command(c, "QUERY_PORT", CmdQueryPort, &queryPort{PortNum: port}, &r)
}

// AllocPD is ALLOC_PD; it returns the PD handle.
func (c *Context) AllocPD() (uint32, error) {
	var r struct{ Handle uint32 }
	return r.Handle, command(c, "ALLOC_PD", CmdAllocPD, &respOnly{}, &r)
}

// DeallocPD is DEALLOC_PD.
func (c *Context) DeallocPD(pd uint32) error {
	return command(c, "DEALLOC_PD", CmdDeallocPD, &handleOnly{Handle: pd}, (*noResp)(nil))
}

// RegMR is REG_MR: register [start, start+length) for the device at I/O
// virtual address hcaVA.
func (c *Context) RegMR(pd uint32, start, length, hcaVA uint64, access uint32) (RegMRResp, error) {
	var r RegMRResp
	req := regMR{Start: start, Length: length, HCAVA: hcaVA, PDHandle: pd, AccessFlags: access}
	return r, command(c, "REG_MR", CmdRegMR, &req, &r)
}

// DeregMR is DEREG_MR.
func (c *Context) DeregMR(mr uint32) error {
	return command(c, "DEREG_MR", CmdDeregMR, &handleOnly{Handle: mr}, (*noResp)(nil))
}

// CreateCompChannel is CREATE_COMP_CHANNEL; it returns the channel's fd.
func (c *Context) CreateCompChannel() (int, error) {
	var r struct{ FD uint32 }
	return int(r.FD), command(c, "CREATE_COMP_CHANNEL", CmdCreateCompChannel, &respOnly{}, &r)
}

// CreateCQ is CREATE_CQ with rxe's response; channel is a completion
// channel fd or -1.
func (c *Context) CreateCQ(userHandle uint64, cqe, compVector uint32, channel int32) (CreateCQResp, error) {
	var r CreateCQResp
	req := createCQ{UserHandle: userHandle, CQE: cqe, CompVector: compVector, CompChannel: channel}
	return r, command(c, "CREATE_CQ", CmdCreateCQ, &req, &r)
}

// DestroyCQ is DESTROY_CQ.
func (c *Context) DestroyCQ(cq uint32) (DestroyCQResp, error) {
	var r DestroyCQResp
	return r, command(c, "DESTROY_CQ", CmdDestroyCQ, &destroy{Handle: cq}, &r)
}

// CreateQP is CREATE_QP with rxe's response.
func (c *Context) CreateQP(req CreateQP) (CreateQPResp, error) {
	var r CreateQPResp
	return r, command(c, "CREATE_QP", CmdCreateQP, &req, &r)
}

// ModifyQP is MODIFY_QP.
func (c *Context) ModifyQP(req ModifyQP) error {
	return command(c, "MODIFY_QP", CmdModifyQP, &req, (*noResp)(nil))
}

// QueryQP is QUERY_QP.
func (c *Context) QueryQP(qp, attrMask uint32) (QueryQPResp, error) {
	var r QueryQPResp
	return r, command(c, "QUERY_QP", CmdQueryQP, &queryQP{QPHandle: qp, AttrMask: attrMask}, &r)
}

// CreateSRQ is CREATE_SRQ with rxe's response.
func (c *Context) CreateSRQ(req CreateSRQ) (CreateSRQResp, error) {
	var r CreateSRQResp
	return r, command(c, "CREATE_SRQ", CmdCreateSRQ, &req, &r)
}

// DestroySRQ is DESTROY_SRQ; it returns how many async events were
// reported.
func (c *Context) DestroySRQ(srq uint32) (uint32, error) {
	var r struct{ EventsReported uint32 }
	return r.EventsReported, command(c, "DESTROY_SRQ", CmdDestroySRQ, &destroy{Handle: srq}, &r)
}

// DestroyQP is DESTROY_QP; it returns how many async events were reported.
func (c *Context) DestroyQP(qp uint32) (uint32, error) {
	var r struct{ EventsReported uint32 }
	return r.EventsReported, command(c, "DESTROY_QP", CmdDestroyQP, &destroy{Handle: qp}, &r)
}
