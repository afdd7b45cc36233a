//go:build linux

package verbs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/internal/rxe"
	"github.com/rivet-hpc/rivet/internal/uverbs"
)

// QPType is a queue pair's transport (ibv_qp_type).
type QPType uint8

// Queue pair types. Only RC is implemented.
const (
	RC QPType = 2
	UC QPType = 3
	UD QPType = 4
)

// QPState is a queue pair's state (ibv_qp_state).
type QPState uint8

// Queue pair states.
const (
	QPReset QPState = 0
	QPInit  QPState = 1
	QPRTR   QPState = 2
	QPRTS   QPState = 3
	QPSQD   QPState = 4
	QPSQE   QPState = 5
	QPError QPState = 6
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// QPConfig configures a queue pair.
type QPConfig struct {
	Type           QPType // 0 means RC
	SendCQ, RecvCQ *CQ
	MaxSendWR      int    // send queue depth; 0 means 128
	MaxRecvWR      int    // receive queue depth; 0 means 128
	MaxSendSGE     int    // 0 means 1
	MaxRecvSGE     int    // 0 means 1
	MaxInline      int    // bytes a send or write may carry inline (rxe: up to 512)
	SignalAll      bool   // every send completes with a completion, whatever its flags
	Port           int    // 0 means 1
	Access         Access // what the peer may do to our memory through this QP; 0 means AccessAll
	// SRQ, if set, is where the QP takes its receives from: MaxRecvWR and
	// MaxRecvSGE are then the SRQ's, and PostRecv is refused (post to the
	// SRQ). It must be of the QP's protection domain.
	SRQ *SRQ
	// Unlocked makes PostSend, PostSendInline and PostRecv take no lock:
	// the caller promises that no post runs at the same time as another
	// post to the same queue, a state change (Connect, SetError, …) or
	// Close, as with an ibverbs QP in a thread domain. See
	// CQConfig.Unlocked.
	Unlocked bool
}

// QP is a queue pair (ibv_qp). A new QP is in INIT: receives may be posted
// at once; Connect brings it to RTS.
type QP struct {
	pd     *PD
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ // QPConfig.SRQ: receives come from there (rq is nil)
	id     uint64
	handle uint32
	qpn    uint32
	psn    uint32
	port   int

	maxSendSGE int
	maxRecvSGE int
	maxInline  int
	maxMsg     uint32

	// Send side, guarded by sqMu; receive side by rqMu. state and closed
	// change only with both held.
	sqMu   sync.Mutex
	sq     *rxe.Queue
	ssn    uint32 // send sequence number of the last posted WQE
	bell   *uverbs.Doorbell
	rqMu   sync.Mutex
	rq     *rxe.Queue
	state  QPState
	closed bool

	unlocked bool // QPConfig.Unlocked: the caller serializes posts

	timeout uint8
	retries uint8
}

// NewQP creates a queue pair and moves it to INIT.
func (pd *PD) NewQP(cfg QPConfig) (*QP, error) {
	c := pd.ctx
	if cfg.Type == 0 {
		cfg.Type = RC
	}
	if cfg.Type != RC {
		return nil, fmt.Errorf("verbs: QP type %d: %w", cfg.Type, ErrNotSupported)
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, invalid("a QP needs a send CQ and a receive CQ")
	}
	if cfg.SendCQ.ctx != c || cfg.RecvCQ.ctx != c {
		return nil, invalid("CQ belongs to another device")
	}
	if cfg.SRQ != nil && cfg.SRQ.pd != pd {
		return nil, invalid("the SRQ is of another protection domain")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MaxSendWR, 128)
	def(&cfg.MaxRecvWR, 128)
	def(&cfg.MaxSendSGE, 1)
	def(&cfg.MaxRecvSGE, 1)
	def(&cfg.Port, 1)
	if cfg.Access == 0 {
		cfg.Access = AccessAll
	}
	switch {
	case cfg.MaxSendWR < 1 || cfg.MaxSendWR > c.attr.MaxQPWR, cfg.MaxRecvWR < 1 || cfg.MaxRecvWR > c.attr.MaxQPWR:
		return nil, invalid("queue depths %d/%d (1 to %d)", cfg.MaxSendWR, cfg.MaxRecvWR, c.attr.MaxQPWR)
	case cfg.MaxSendSGE < 1 || cfg.MaxSendSGE > c.attr.MaxSGE, cfg.MaxRecvSGE < 1 || cfg.MaxRecvSGE > c.attr.MaxSGE:
		return nil, invalid("SGE counts %d/%d (1 to %d)", cfg.MaxSendSGE, cfg.MaxRecvSGE, c.attr.MaxSGE)
	case cfg.MaxInline < 0 || cfg.MaxInline > 512:
		return nil, invalid("max inline %d (0 to 512 on rxe)", cfg.MaxInline)
	case cfg.Port < 1 || cfg.Port > c.attr.PhysPortCnt:
		return nil, invalid("port %d", cfg.Port)
	case cfg.Access&^AccessAll != 0:
		return nil, invalid("access flags %#x", uint32(cfg.Access))
	}
	port, err := c.QueryPort(cfg.Port)
	if err != nil {
		return nil, err
	}
	if err := pd.acquire(); err != nil {
		return nil, err
	}
	if err := cfg.SendCQ.acquire(); err != nil {
		pd.release()
		return nil, err
	}
	if err := cfg.RecvCQ.acquire(); err != nil {
		cfg.SendCQ.release()
		pd.release()
		return nil, err
	}
	if cfg.SRQ != nil {
		if err := cfg.SRQ.acquire(); err != nil {
			cfg.RecvCQ.release()
			cfg.SendCQ.release()
			pd.release()
			return nil, err
		}
	}
	qp := &QP{pd: pd, sendCQ: cfg.SendCQ, recvCQ: cfg.RecvCQ, srq: cfg.SRQ, id: c.nextID.Add(1), port: cfg.Port,
		psn: rand.Uint32() & 0xffffff, maxMsg: port.MaxMsgSize, unlocked: cfg.Unlocked}
	if err := qp.create(cfg); err != nil {
		if cfg.SRQ != nil {
			cfg.SRQ.release()
		}
		cfg.RecvCQ.release()
		cfg.SendCQ.release()
		pd.release()
		return nil, err
	}
	c.mu.Lock()
	c.qps[qp.id] = qp
	c.mu.Unlock()
	return qp, nil
}

func (qp *QP) create(cfg QPConfig) error {
	c := qp.pd.ctx
	req := uverbs.CreateQP{
		UserHandle: qp.id, PDHandle: qp.pd.handle, SendCQHandle: cfg.SendCQ.handle, RecvCQHandle: cfg.RecvCQ.handle,
		MaxSendWR: uint32(cfg.MaxSendWR), MaxRecvWR: uint32(cfg.MaxRecvWR), MaxSendSGE: uint32(cfg.MaxSendSGE),
		MaxRecvSGE: uint32(cfg.MaxRecvSGE), MaxInlineData: uint32(cfg.MaxInline), QPType: uint8(cfg.Type),
	}
	if cfg.SignalAll {
		req.SQSigAll = 1
	}
	if cfg.SRQ != nil {
		req.SRQHandle, req.IsSRQ = cfg.SRQ.handle, 1
		req.MaxRecvWR, req.MaxRecvSGE = 0, 0
	}
	r, err := c.uv.CreateQP(req)
	if err != nil {
		return c.wrap(err)
	}
	qp.handle, qp.qpn = r.QPHandle, r.QPN
	fail := func(err error) error {
		if qp.sq != nil {
			unix.Munmap(qp.sq.Bytes())
		}
		if qp.rq != nil {
			unix.Munmap(qp.rq.Bytes())
		}
		c.uv.DestroyQP(qp.handle)
		return c.wrap(err)
	}
	rings := []struct {
		mi  uverbs.MMInfo
		dst **rxe.Queue
	}{{r.SQ, &qp.sq}, {r.RQ, &qp.rq}}
	if cfg.SRQ != nil {
		rings = rings[:1] // no receive ring: the SRQ's
	}
	for _, m := range rings {
		buf, err := c.uv.MmapRing(m.mi)
		if err != nil {
			return fail(err)
		}
		if *m.dst, err = rxe.NewQueue(buf); err != nil {
			unix.Munmap(buf)
			return fail(err)
		}
		(*m.dst).InitProducer()
	}
	// What fits in a slot bounds what the kernel reported, whichever is less.
	qp.maxSendSGE = min(int(r.MaxSendSGE), (int(qp.sq.ElemSize())-rxe.SendWQEHeaderSize)/rxe.SGESize)
	qp.maxInline = min(int(r.MaxInlineData), int(qp.sq.ElemSize())-rxe.SendWQEHeaderSize)
	if qp.rq != nil {
		qp.maxRecvSGE = min(int(r.MaxRecvSGE), (int(qp.rq.ElemSize())-rxe.RecvWQEHeaderSize)/rxe.SGESize)
	}
	qp.bell = c.uv.NewDoorbell(qp.handle)

	m := uverbs.ModifyQP{QPHandle: qp.handle, QPState: uint8(QPInit), PortNum: uint8(cfg.Port),
		QPAccessFlags: uint32(cfg.Access),
		AttrMask:      uverbs.QPState | uverbs.QPPKeyIndex | uverbs.QPPort | uverbs.QPAccessFlags}
	if err := c.uv.ModifyQP(m); err != nil {
		return fail(fmt.Errorf("RESET to INIT: %w", err))
	}
	qp.state = QPInit
	return nil
}

// QPN is the queue pair number peers address.
func (qp *QP) QPN() uint32 { return qp.qpn }

// PSN is the first packet sequence number this QP sends with.
func (qp *QP) PSN() uint32 { return qp.psn }

// State is the state as last set through this QP. The device may have moved
// it to ERR since (a failed request does); Query asks.
func (qp *QP) State() QPState {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	return qp.state
}

// Endpoint is what a peer needs to connect to a queue pair: exchange it out
// of band (TCP, a launcher's key-value store).
type Endpoint struct {
	GID hw.GID
	QPN uint32
	PSN uint32
	LID uint16 // InfiniBand only; 0 on RoCE
}

// Endpoint returns this QP's endpoint with the given local GID.
func (qp *QP) Endpoint(gid hw.GID) Endpoint { return Endpoint{GID: gid, QPN: qp.qpn, PSN: qp.psn} }

// Defaults for ConnectConfig. With them a dead peer is noticed within
// RetryBound(DefaultTimeout, DefaultRetryCount) ≈ 0.54 s.
const (
	DefaultTimeout     = 14 // 4.096 µs << 14 ≈ 67 ms per retransmission
	DefaultRetryCount  = 6
	DefaultRNRRetry    = 6
	DefaultMinRNRTimer = 12 // 0.64 ms
	DefaultRdAtomic    = 16
)

// ConnectConfig says how to reach the peer and how hard to try.
type ConnectConfig struct {
	// GIDIndex is the local source GID's index (sgid_index). -1 picks the
	// RoCE v2 GID whose address family matches the remote GID on the port's
	// netdev. rxe requires both GIDs to be of the same family.
	GIDIndex int
	MTU      hw.MTU // 0 means the port's active MTU
	// Timeout is the local ACK timeout exponent: a retransmission after
	// 4.096 µs << Timeout (rounded up to one kernel tick). 1..31; 0 means
	// DefaultTimeout. Timeout 0 in the kernel would disable the timer,
	// which Rivet never asks for.
	Timeout uint8
	// RetryCount is how many retransmissions precede a retry-exceeded
	// completion: 1..6, or 0 for DefaultRetryCount. 7 would mean "forever"
	// on rxe (not the IBTA's 7) and is refused; use NoRetry for none.
	RetryCount int
	// RNRRetry is how often a receiver-not-ready NAK is retried: 1..7 (7 =
	// forever, as the IBTA says), 0 for DefaultRNRRetry, NoRetry for none.
	RNRRetry        int
	MinRNRTimer     uint8 // 0 means DefaultMinRNRTimer
	MaxRdAtomic     int   // reads/atomics in flight as initiator; 0 means min(DefaultRdAtomic, device)
	MaxDestRdAtomic int   // ... as target; 0 likewise
	HopLimit        uint8 // 0 means 64
	TrafficClass    uint8
}

// NoRetry asks for zero retries in ConnectConfig.
const NoRetry = -1

// RetryBound is the longest a requester waits for a dead peer before the
// send queue's first outstanding request completes with
// StatusRetryExcErr. The error comes on the (retries+1)-th expiry of the
// retransmission timer; the first expiry may come early because earlier
// traffic armed the timer (rxe does not restart it per packet), so the wait
// lies between retries and retries+2 periods. A period is
// 4.096 µs << timeout, at least one tick (4 ms at CONFIG_HZ=250). It is a
// bound for a kernel that runs its timers on time: a loaded host may run
// a virtual machine's late.
func RetryBound(timeout uint8, retries int) time.Duration {
	period := max(time.Duration(4096<<timeout)*time.Nanosecond, 4*time.Millisecond)
	return time.Duration(retries+2) * period
}

// Connect moves the QP through RTR to RTS, connected to remote.
func (qp *QP) Connect(remote Endpoint, cfg ConnectConfig) error {
	c := qp.pd.ctx
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	retries, err := retryCount(cfg.RetryCount, DefaultRetryCount, 6, "retry count")
	if err != nil {
		return err
	}
	rnr, err := retryCount(cfg.RNRRetry, DefaultRNRRetry, 7, "RNR retry")
	if err != nil {
		return err
	}
	if cfg.Timeout > 31 {
		return invalid("timeout %d (1 to 31)", cfg.Timeout)
	}
	if cfg.MinRNRTimer == 0 {
		cfg.MinRNRTimer = DefaultMinRNRTimer
	}
	if cfg.HopLimit == 0 {
		cfg.HopLimit = 64
	}
	rd := func(v int) (uint8, error) {
		if v == 0 {
			v = min(DefaultRdAtomic, c.attr.MaxQPRdAtom)
		}
		if v < 1 || v > c.attr.MaxQPRdAtom || v > 255 {
			return 0, invalid("outstanding reads/atomics %d (1 to %d)", v, c.attr.MaxQPRdAtom)
		}
		return uint8(v), nil
	}
	maxRd, err := rd(cfg.MaxRdAtomic)
	if err != nil {
		return err
	}
	maxDestRd, err := rd(cfg.MaxDestRdAtomic)
	if err != nil {
		return err
	}
	if remote.QPN == 0 || remote.QPN > 0xffffff || remote.PSN > 0xffffff || remote.GID.IsZero() {
		return invalid("remote endpoint %+v", remote)
	}
	port, err := c.QueryPort(qp.port)
	if err != nil {
		return err
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = port.ActiveMTU
	}
	if mtu.Bytes() == 0 || mtu > port.ActiveMTU {
		return invalid("MTU %s (the port's active MTU is %s)", mtu, port.ActiveMTU)
	}
	sgid := cfg.GIDIndex
	if sgid < 0 {
		g, err := localGID(c, qp.port, remote.GID)
		if err != nil {
			return err
		}
		sgid = g
	}
	if sgid >= port.GIDTableLen {
		return invalid("GID index %d (table has %d entries)", sgid, port.GIDTableLen)
	}

	unlock, err := qp.lockOpen()
	if err != nil {
		return err
	}
	defer unlock()
	if qp.state != QPInit {
		return fmt.Errorf("verbs: connecting QP %#x in state %s: %w", qp.qpn, qp.state, ErrState)
	}
	rtr := uverbs.ModifyQP{
		QPHandle: qp.handle, QPState: uint8(QPRTR), PathMTU: uint8(mtu), DestQPNum: remote.QPN, RQPSN: remote.PSN,
		MaxDestRdAtomic: maxDestRd, MinRNRTimer: cfg.MinRNRTimer,
		Dest: uverbs.QPDest{DGID: remote.GID, SGIDIndex: uint8(sgid), HopLimit: cfg.HopLimit,
			TrafficClass: cfg.TrafficClass, IsGlobal: 1, PortNum: uint8(qp.port), DLID: remote.LID},
		AttrMask: uverbs.QPState | uverbs.QPAV | uverbs.QPPathMTU | uverbs.QPDestQPN | uverbs.QPRQPSN |
			uverbs.QPMaxDestRdAtom | uverbs.QPMinRNRTimer,
	}
	if err := c.uv.ModifyQP(rtr); err != nil {
		return fmt.Errorf("verbs: QP %#x INIT to RTR: %w", qp.qpn, err)
	}
	qp.state = QPRTR
	rts := uverbs.ModifyQP{
		QPHandle: qp.handle, QPState: uint8(QPRTS), Timeout: cfg.Timeout, RetryCnt: retries, RNRRetry: rnr,
		SQPSN: qp.psn, MaxRdAtomic: maxRd,
		AttrMask: uverbs.QPState | uverbs.QPTimeout | uverbs.QPRetryCnt | uverbs.QPRNRRetry | uverbs.QPSQPSN |
			uverbs.QPMaxQPRdAtomic,
	}
	if err := c.uv.ModifyQP(rts); err != nil {
		return fmt.Errorf("verbs: QP %#x RTR to RTS: %w", qp.qpn, err)
	}
	qp.state = QPRTS
	qp.timeout, qp.retries = cfg.Timeout, retries
	return nil
}

// FailureBound is RetryBound for the timeout and retry count Connect set:
// how long a request to a dead peer can take to fail.
func (qp *QP) FailureBound() time.Duration { return RetryBound(qp.timeout, int(qp.retries)) }

func retryCount(v, def, maxv int, what string) (uint8, error) {
	switch {
	case v == 0:
		return uint8(def), nil
	case v == NoRetry:
		return 0, nil
	case v == 7 && maxv == 6:
		return 0, invalid("%s 7 retries forever on rxe (its 7 is never decremented): use 1 to 6", what)
	case v < 1 || v > maxv:
		return 0, invalid("%s %d (1 to %d, or NoRetry)", what, v, maxv)
	}
	return uint8(v), nil
}

// localGID picks the RoCE v2 GID on the port whose family matches remote:
// from the table read at Open, or, if that has none (an address added
// since), from sysfs again — which reads a file per GID entry, a thousand
// on rxe, so not on every connection.
func localGID(c *Context, port int, remote hw.GID) (int, error) {
	if ix, ok := roceGIDIndex(c.dev, port, remote); ok {
		return ix, nil
	}
	d, err := hw.DeviceByName(c.dev.Name)
	if err != nil && len(d.Ports) == 0 {
		return 0, c.wrap(err)
	}
	if ix, ok := roceGIDIndex(d, port, remote); ok {
		return ix, nil
	}
	return 0, fmt.Errorf("verbs: %s port %d has no RoCE v2 GID of the remote's family: %w", c.dev.Name, port, hw.ErrNotFound)
}

func roceGIDIndex(d hw.Device, port int, remote hw.GID) (int, bool) {
	for _, p := range d.Ports {
		if p.Number != port {
			continue
		}
		for _, g := range p.GIDs {
			if g.Type == hw.GIDTypeRoCEv2 && g.GID.IsIPv4() == remote.IsIPv4() {
				return g.Index, true
			}
		}
	}
	return 0, false
}

// QPAttr is what QUERY_QP reports.
type QPAttr struct {
	State        QPState
	PathMTU      hw.MTU
	DestQPN      uint32
	RQPSN, SQPSN uint32
	Timeout      uint8
	RetryCount   uint8
	RNRRetry     uint8
	MaxRdAtomic  uint8
	MaxSendWR    int
	MaxRecvWR    int
	MaxInline    int
	Access       Access
}

// Query asks the device for the QP's attributes.
func (qp *QP) Query() (QPAttr, error) {
	qp.sqMu.Lock()
	closed := qp.closed
	qp.sqMu.Unlock()
	if closed {
		return QPAttr{}, fmt.Errorf("verbs: QP %#x: %w", qp.qpn, ErrClosed)
	}
	r, err := qp.pd.ctx.uv.QueryQP(qp.handle, 0xffffffff)
	if err != nil {
		return QPAttr{}, qp.pd.ctx.wrap(err)
	}
	return QPAttr{State: QPState(r.QPState), PathMTU: hw.MTU(r.PathMTU), DestQPN: r.DestQPNum, RQPSN: r.RQPSN,
		SQPSN: r.SQPSN, Timeout: r.Timeout, RetryCount: r.RetryCnt, RNRRetry: r.RNRRetry, MaxRdAtomic: r.MaxRdAtomic,
		MaxSendWR: int(r.MaxSendWR), MaxRecvWR: int(r.MaxRecvWR), MaxInline: int(r.MaxInlineData),
		Access: Access(r.QPAccessFlags)}, nil
}

// SendQueued is how many send requests posted to the QP the device has
// not completed yet, signaled or not. It falls as the peer acknowledges
// them: one that stays up while the peer is alive and reachable says the
// queue pair is stuck.
func (qp *QP) SendQueued() int {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	if qp.closed {
		return 0
	}
	return int(qp.sq.Outstanding())
}

// SetError moves the QP to ERR: outstanding work requests complete with
// StatusWRFlushErr. It is how a QP is drained before Close.
func (qp *QP) SetError() error {
	unlock, err := qp.lockOpen()
	if err != nil {
		return err
	}
	defer unlock()
	m := uverbs.ModifyQP{QPHandle: qp.handle, QPState: uint8(QPError), AttrMask: uverbs.QPState}
	if err := qp.pd.ctx.uv.ModifyQP(m); err != nil {
		return qp.pd.ctx.wrap(err)
	}
	qp.state = QPError
	return nil
}

// lockOpen takes both sides' locks, as every state change does, and fails
// if the QP is closed.
func (qp *QP) lockOpen() (unlock func(), err error) {
	qp.sqMu.Lock()
	qp.rqMu.Lock()
	unlock = func() { qp.rqMu.Unlock(); qp.sqMu.Unlock() }
	if qp.closed {
		unlock()
		return nil, fmt.Errorf("verbs: QP %#x: %w", qp.qpn, ErrClosed)
	}
	return unlock, nil
}

// Close destroys the QP and unmaps its rings. Posting afterwards returns
// ErrClosed. Closing twice is not an error.
func (qp *QP) Close() error {
	qp.sqMu.Lock()
	qp.rqMu.Lock()
	defer qp.rqMu.Unlock()
	defer qp.sqMu.Unlock()
	if qp.closed {
		return nil
	}
	c := qp.pd.ctx
	if _, err := c.uv.DestroyQP(qp.handle); err != nil {
		return c.wrap(err)
	}
	qp.closed = true
	// The kernel keeps the ring memory until the last mapping goes, so
	// unmapping after DESTROY is safe.
	err := unix.Munmap(qp.sq.Bytes())
	if qp.rq != nil {
		err = errors.Join(err, unix.Munmap(qp.rq.Bytes()))
	}
	c.mu.Lock()
	delete(c.qps, qp.id)
	c.mu.Unlock()
	qp.sendCQ.release()
	qp.recvCQ.release()
	if qp.srq != nil {
		qp.srq.release()
	}
	qp.pd.release()
	return err
}
