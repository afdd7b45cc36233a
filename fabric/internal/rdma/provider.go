//go:build linux

// Package rdma is the fabric's verbs provider: one reliable-connected
// queue pair per peer, made on first use (connect.go), all on one device
// and protection domain; sends complete on a completion queue shared by
// 16 peers (made as they connect), each peer's receives on its own
// (polled in turn, for fairness).
//
// Eager messages (≤ 8 KiB) are RDMA sends into one pool of receive
// buffers, posted in advance to a shared receive queue: vPool of them
// (2 MiB), whatever the number of peers. A sender holds a credit per
// buffer the receiver set aside for it and never sends without one, so a
// receive is never missing (no receiver-not-ready NAKs, which would stall
// the queue pair) and the memory for them is fixed; the receiver grants
// credits from the pool to the peers that use them (credits.go).
//
// Longer messages go by rendezvous: the RTS frame names the message by
// address and rkey, the receiver RDMA-reads it and answers with FIN. Memory
// from Endpoint.AllocMem is registered once (on first use) and moves with
// zero copies; any other buffer — Go's heap, which the runtime may free and
// reuse while a registration pins it — is staged through registered
// buffers kept in size classes for reuse.
//
// A failed completion is a per-peer fact: the peer's queue pair is in
// error, that peer is marked failed (or closed, if it said goodbye first),
// and every other peer carries on.
//
// The provider hands what arrives to the fabric's matching engine
// (Engine) and is driven only under the engine's lock: nothing here runs
// on its own but the connection handshakes, which take that lock.
package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/internal/critpath"
	"github.com/rivet-hpc/rivet/verbs"
)

// Eager is the largest payload one frame carries; longer messages go by
// rendezvous.
const Eager = vEager

const (
	vEager     = 8 << 10 // largest eager payload
	vSendSlots = 128     // staging slots for sends that are not inline
	vInline    = 256     // QP inline capacity; frames up to it go inline
	// vSQ is the send queue depth per peer: 2^k-1, since rxe makes a ring
	// of the next power of two above the depth asked for, of 512-byte
	// slots (256 bytes inline): 128 KiB a peer (512 asked for 512 KiB).
	vSQ          = 255
	vStageKeep   = 64 << 20 // staging memory kept for reuse
	vMaxOneSided = 1024     // one-sided operations in flight
	// vRepostBatch is how many delivered receive buffers a poll posts
	// again at once: one post per buffer cost a ping-pong about 270
	// guest instructions per message, a tenth of the fabric's own
	// (lab/insncount.sh). A sender whose credits wait in a batch asks
	// for them (canSend), and the request posts the batch.
	vRepostBatch = 16
)

// vSlotSize is a buffer for a header and an eager payload, in whole
// cache lines.
const vSlotSize = (wire.VerbsHeaderLen + vEager + 63) &^ 63

// Work request IDs: the kind in the top byte, an index below.
const (
	wrRecv uint64 = (iota + 1) << 56
	wrSend
	wrRead
	wrCtl // control writes: credits (unsignaled), goodbye (ID wrCtl|1)
	wrOneSided
	wrProbe
	wrBeat     // a read of a peer's heartbeat word
	wrFence    // the write of a peer's fence word
	wrKindMask = 0xff << 56
)

type link struct {
	world int
	qp    *verbs.QP
	rcq   *verbs.CQ // receives from this peer alone (vWindow at most), for fair polling
	// Connection: our queue pair is connected (RTS) to the peer's; the
	// peer's is connected too, so frames may go; a handshake is under way.
	connected, ready, dialing bool
	ctl                       verbs.RemoteBuf // the peer's control words
	// Credits for our frames to the peer (credits.go), as running counts
	// modulo 2^32: frames sent (and credits burned), the peer's granted
	// count as last heard, credits burned; requests made, and the sent
	// count at the last (asked: one is made); the peer's revoke count as
	// last seen.
	sent, limit, burned, requests, askedAt, revokeSeen uint32
	asked                                              bool

	// Credits for its frames to us: granted, and the count we last told
	// it; its frames delivered; its burned count and request word as last
	// seen; our revokes and the count of them told; its window (grant).
	granted, told, taken, burnSeen, revokes, revokesTold uint32
	requestSeen                                          uint64
	window                                               int

	starving   bool // it asked for credits, had sent waitAt frames, and waits for a grant beyond
	waitAt     uint32
	revoked    bool // asked to give back unused credits since last granted any
	active     bool // a frame of its was delivered since the last reclaim
	faulted    bool // lost: its credits go back at the next poll (release)
	burnOwed   bool // our burned count is still to be told (tellBurned)
	creditOwed bool // our granted count is still to be told (writeCredits)
	released   bool // they went back

	oneSided Counts
	probing  bool      // a probe is in flight
	beat     uint64    // the peer's heartbeat count, as last read
	beatAt   time.Time // when that read's completion was taken; zero before
	beatBusy bool      // a read is in flight
	dead     bool      // its queue pair failed
}

type vRead struct {
	r     any // the engine's receive
	peer  int
	id    uint64
	dst   []byte
	stage *verbs.MR
	sges  []verbs.SGE    // one per chunk of at most the port's message size
	wrs   []verbs.SendWR // kept across uses of the slot
}

// Engine is what the provider hands frames and finished reads to, and
// reports lost peers to: the fabric's matching engine. A receive is the
// engine's own value (req), which the provider only passes back.
type Engine interface {
	// Deliver takes a frame from world rank peer; h and p are valid only
	// during the call.
	Deliver(peer int, h *wire.Header, p *wire.Payload)
	// Abandoned reports whether receive req was given up by its caller:
	// its buffer is no longer the receive's to write.
	Abandoned(req any) bool
	// ReadDone ends receive req of rendezvous message id from peer.
	ReadDone(req any, peer int, id uint64, err error)
	// Failed reports whether world rank peer is already known gone.
	Failed(peer int) bool
	// Lost says world rank peer cannot be reached any more, for cause
	// (which wraps ErrGone or ErrNoRoute when the provider knows which);
	// closed is true when the peer said goodbye first.
	Lost(peer int, closed bool, cause error)
	// WaitedOn sets waited[w] for every world rank w an operation waits
	// for, so that Probe checks on those.
	WaitedOn(waited []bool)
}

// Registry finds the registration of memory the fabric handed out for
// zero-copy moves (AllocMem).
type Registry interface {
	// Lookup returns the registration on pd that covers b and b's offset
	// in it, registering on first use; nil for other memory.
	Lookup(pd *verbs.PD, b []byte) (*verbs.MR, uint64, error)
	// Deregister drops every registration: the provider is closing.
	Deregister()
}

// Config is what New needs to know.
type Config struct {
	Device string              // the device to open ("" for the first active one)
	QP     verbs.ConnectConfig // timeout and retry count for every queue pair
	Me     int                 // this process's world rank
	Size   int                 // the universe's size: every world rank is below it
	Peers  []int               // world ranks reached through this provider
	Mem    Registry
	// Initial is how many credits (receive buffers) each peer gets when
	// it connects, as far as the pool allows; 0 means the pool's share of
	// each of Peers, 4 to 64. More are granted as it uses them.
	Initial int
	// Resolve reads the published address (Address) of world rank w, a
	// peer, from the bootstrap; it is called, once a peer, when this
	// process first connects to w or w to it, from a goroutine of the
	// provider's and without the engine's lock.
	Resolve func(ctx context.Context, w int) ([]byte, error)
}

// Provider is this process's side of the verbs provider.
type Provider struct {
	qpConf   verbs.ConnectConfig // timeout and retry count for every queue pair
	dev      *verbs.Context
	pd       *verbs.PD
	cq       *verbs.CQ   // the first of cqs, which the loopback pair uses
	cqs      []*verbs.CQ // send CQs, one per cqShard peers (sendCQ)
	gid      hw.GID
	gidIndex int
	me       int
	maxMsg   int     // the port's largest message
	rdChunk  int     // the most one RDMA read asks for (ReadChunk)
	peers    []*link // by world rank; nil for peers reached otherwise
	byQPN    map[uint32]*link
	self     *link     // a loopback queue pair, for one-sided operations on this process's own memory
	selfT    *verbs.QP // its target end
	next     int       // the peer whose receives the next poll looks at first
	probed   time.Time
	waited   []bool    // by world rank: scratch for probe
	sendBuf  *verbs.MR // vSendSlots staging slots for frames too long to go inline
	free     []int     // free send slots
	ctl      *verbs.MR // vCtlWords per world rank, then the words from ctlSrc on
	beats    *verbs.MR // a word per world rank: where reads of heartbeats land
	mem      Registry

	reads     []vRead
	freeReads []int
	deferred  []int // reads the send queue had no room for
	staged    map[uint64]*verbs.MR
	stages    [64][]*verbs.MR // free staging buffers by size class
	kept      int
	dead      []peerFault // failures noticed outside a poll

	// The receive pool: its buffers and their receive requests (made
	// once); who may send into them (credits.go).
	srq    *verbs.SRQ
	recv   *verbs.MR
	rwr    [vPool]verbs.RecvWR
	rsge   [vPool]verbs.SGE
	postWR [vPool]verbs.RecvWR
	credits

	eng      Engine
	mu       sync.Locker // the engine's lock, which the handshakes take
	addrs    []peerAddr  // by world rank, from the bootstrap (tcp "" until known)
	learning []bool      // by world rank: its address is being read (learn)
	resolve  func(ctx context.Context, w int) ([]byte, error)
	isPeer   []bool // by world rank: reached over verbs
	ln       net.Listener
	conns    map[net.Conn]bool // handshakes in progress
	token    [16]byte          // proves a handshake comes from this job
	closing  bool
	hs       sync.WaitGroup  // handshake goroutines (handshakeGo)
	hsCtx    context.Context // ends at close: dials in progress stop
	hsStop   context.CancelFunc

	events *armed // the completion channel a waiting process sleeps on (idle.go); nil if none

	oneSided     []inflight // one-sided operations in flight
	freeOneSided []int
	atoms        *verbs.MR // an 8-byte result slot per entry of oneSided
	wcs          [32]verbs.WorkCompletion
	sge          [1]verbs.SGE
	wr           [1]verbs.SendWR
	bellSGE      [1]verbs.SGE
	wr2          [2]verbs.SendWR
	h            wire.Header  // the frame being delivered: here, not on the stack,
	pl           wire.Payload // since the Engine's methods might keep them
}

type peerFault struct {
	peer  int
	cause error
}

// New opens cfg.Device and readies the provider for cfg.Peers; queue
// pairs are made when first used. mu is the engine's lock.
func New(cfg Config, eng Engine, mu sync.Locker) (_ *Provider, err error) {
	size, peers := cfg.Size, cfg.Peers
	v := &Provider{me: cfg.Me, qpConf: cfg.QP, peers: make([]*link, size), byQPN: map[uint32]*link{},
		staged: map[uint64]*verbs.MR{}, mem: cfg.Mem, reads: make([]vRead, 0, 64),
		oneSided: make([]inflight, 0, vMaxOneSided), eng: eng, mu: mu, addrs: make([]peerAddr, size), isPeer: make([]bool, size),
		learning: make([]bool, size), resolve: cfg.Resolve, waited: make([]bool, size)}
	v.credits.io = v
	// As many as the pool holds for every peer of the job, 4 to 64: a
	// small job's peers start with a full window.
	v.initial = min(max(vPool/max(1, len(peers)), vInitial), vWindow)
	if cfg.Initial > 0 {
		v.initial = min(cfg.Initial, vWindow)
	}
	for _, w := range peers {
		v.isPeer[w] = true
	}
	defer func() {
		if err != nil {
			v.Close()
		}
	}()
	if v.dev, err = verbs.Open(cfg.Device); err != nil {
		return nil, fmt.Errorf("verbs provider: %w", err)
	}
	if v.gid, v.gidIndex, err = roceGID(v.dev); err != nil {
		return nil, err
	}
	port, err := v.dev.QueryPort(1)
	if err != nil {
		return nil, fmt.Errorf("verbs provider: %w", err)
	}
	v.maxMsg = int(min(port.MaxMsgSize, 1<<30))
	v.rdChunk = min(v.maxMsg, readPackets*max(port.ActiveMTU.Bytes(), 256))
	if v.pd, err = v.dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("verbs provider: %w", err)
	}
	v.events = newEvents(v.dev)
	// The first send CQ, which the loopback pair shares with the first
	// peers.
	if v.cq, err = v.newSendCQ(cqShard + 1); err != nil {
		return nil, err
	}
	if v.sendBuf, err = v.pd.Alloc(vSendSlots*vSlotSize, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("verbs provider: send buffers: %w", err)
	}
	if err := v.newPool(); err != nil {
		return nil, err
	}
	// Peers write credits, goodbyes and verdicts here, ring the doorbell
	// and read the heartbeat.
	if v.ctl, err = v.pd.Alloc(ctlLen(size), verbs.AccessAll); err != nil {
		return nil, fmt.Errorf("verbs provider: control words: %w", err)
	}
	if v.beats, err = v.pd.Alloc(size*8, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("verbs provider: heartbeat reads: %w", err)
	}
	if v.atoms, err = v.pd.Alloc(vMaxOneSided*8, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("verbs provider: atomic results: %w", err)
	}
	for i := vSendSlots - 1; i >= 0; i-- {
		v.free = append(v.free, i)
	}
	if err := v.loopback(); err != nil {
		return nil, err
	}
	if err := v.listen(); err != nil {
		return nil, err
	}
	return v, nil
}

// cqShard is how many peers' queue pairs share a send CQ. Each may hold
// vSQ requests, and a queue pair that fails completes every one, signaled
// or not: one CQ for every peer of the job, made at start, needs vSQ
// entries a peer — more than rxe allows one CQ (32767) beyond 127
// peers, and 32 KiB (rxe's entries are 128 bytes) for each peer never
// talked to. So CQs are made as peers connect.
const cqShard = 16

// newSendCQ makes a send CQ for the send queues of qps queue pairs.
func (v *Provider) newSendCQ(qps int) (*verbs.CQ, error) {
	// Every queue and completion queue here is used with the engine's
	// lock held, so they take no lock of their own (Unlocked): each lock
	// taken and released cost about 50 ns under TCG, twice between a
	// message's arrival and the answer's doorbell.
	cq, err := v.dev.NewCQ(verbs.CQConfig{Size: qps * vSQ, Channel: v.events.channel(), Unlocked: true})
	if err != nil {
		return nil, fmt.Errorf("verbs provider: send completion queue: %w", err)
	}
	v.cqs = append(v.cqs, cq)
	v.events.add(cq)
	return cq, nil
}

// sendCQ returns the send CQ for the next peer's queue pair.
func (v *Provider) sendCQ() (*verbs.CQ, error) {
	if k := len(v.byIx) / cqShard; k < len(v.cqs) {
		return v.cqs[k], nil
	}
	return v.newSendCQ(cqShard)
}

// newPool makes the shared receive queue and its buffers, and posts them.
func (v *Provider) newPool() (err error) {
	if v.srq, err = v.pd.NewSRQ(verbs.SRQConfig{MaxWR: vPool}); err != nil {
		return fmt.Errorf("verbs provider: shared receive queue: %w", err)
	}
	if v.recv, err = v.pd.Alloc(vPool*vSlotSize, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("verbs provider: receive buffers: %w", err)
	}
	for k := range vPool {
		v.rsge[k] = verbs.SGE{MR: v.recv, Offset: uint64(k * vSlotSize), Length: vSlotSize}
		v.rwr[k] = verbs.RecvWR{ID: wrRecv | uint64(k), Local: v.rsge[k : k+1]}
	}
	v.toPost = make([]int, 0, vPool)
	if err := v.srq.PostRecv(v.rwr[:]...); err != nil {
		return fmt.Errorf("verbs provider: receive buffers: %w", err)
	}
	return nil
}

// newPeer makes world rank w's queue pair and its receive completion
// queue, and sets credits aside for it (its initial window, as the pool
// allows), which the handshake tells it; with the engine's lock held.
func (v *Provider) newPeer(w int) (_ *link, err error) {
	p := &link{world: w}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	scq, err := v.sendCQ()
	if err != nil {
		return nil, err
	}
	if p.rcq, err = v.dev.NewCQ(verbs.CQConfig{Size: vWindow, Channel: v.events.channel(), Unlocked: true}); err != nil {
		return nil, fmt.Errorf("verbs provider: %w", err)
	}
	if p.qp, err = v.pd.NewQP(verbs.QPConfig{SendCQ: scq, RecvCQ: p.rcq, SRQ: v.srq, MaxSendWR: vSQ,
		MaxInline: vInline, Unlocked: true}); err != nil {
		return nil, fmt.Errorf("verbs provider: queue pair for rank %d: %w", w, err)
	}
	p.window = v.initial
	v.grant(p)
	p.told = p.granted
	p.ctl = v.addrs[w].ctl
	v.peers[w], v.byQPN[p.qp.QPN()] = p, p
	v.byIx = append(v.byIx, p)
	v.events.add(p.rcq)
	return p, nil
}

func (p *link) close() {
	if p.qp != nil {
		p.qp.Close()
	}
	if p.rcq != nil {
		p.rcq.Close()
	}
}

// loopback connects a pair of queue pairs of this process to each other.
func (v *Provider) loopback() error {
	cfg := verbs.QPConfig{SendCQ: v.cq, RecvCQ: v.cq, MaxSendWR: vSQ, MaxRecvWR: 1, Unlocked: true}
	a, err := v.pd.NewQP(cfg)
	if err != nil {
		return fmt.Errorf("verbs provider: loopback queue pair: %w", err)
	}
	v.self = &link{world: v.me, qp: a}
	v.byQPN[a.QPN()] = v.self
	if v.selfT, err = v.pd.NewQP(cfg); err != nil {
		return fmt.Errorf("verbs provider: loopback queue pair: %w", err)
	}
	if err := a.Connect(v.selfT.Endpoint(v.gid), v.connectConfig()); err != nil {
		return fmt.Errorf("verbs provider: loopback: %w", err)
	}
	if err := v.selfT.Connect(a.Endpoint(v.gid), v.connectConfig()); err != nil {
		return fmt.Errorf("verbs provider: loopback: %w", err)
	}
	return nil
}

// roceGID is the device's first RoCE v2 GID on port 1, IPv4 preferred,
// and its index. (Passing the index to Connect spares it a fresh read of
// the GID table from sysfs — a thousand files on rxe.)
func roceGID(dev *verbs.Context) (hw.GID, int, error) {
	found, ix := hw.GID{}, -1
	for _, p := range dev.Device().Ports {
		if p.Number != 1 {
			continue
		}
		for _, g := range p.GIDs {
			if g.Type != hw.GIDTypeRoCEv2 || g.GID.IsZero() {
				continue
			}
			if g.GID.IsIPv4() {
				return g.GID, g.Index, nil
			}
			if ix < 0 {
				found, ix = g.GID, g.Index
			}
		}
	}
	if ix < 0 {
		return found, ix, fmt.Errorf("verbs provider: %s port 1 has no RoCE v2 GID", dev.Name())
	}
	return found, ix, nil
}

// Device is the device the provider uses.
func (v *Provider) Device() *verbs.Context { return v.dev }

// PD is the protection domain every registration of the provider's is in.
func (v *Provider) PD() *verbs.PD { return v.pd }

// connectConfig is how every queue pair of v connects.
func (v *Provider) connectConfig() verbs.ConnectConfig {
	c := v.qpConf
	c.GIDIndex = v.gidIndex
	return c
}

// FailureBound is how long a request to a dead peer takes to fail.
func (v *Provider) FailureBound() time.Duration {
	return verbs.RetryBound(v.qpConf.Timeout, v.qpConf.RetryCount)
}

// ctlWord is control word k (ctlCredit…) of world rank w.
func (v *Provider) ctlWord(w, k int) *uint64 { return v.ctlAt(uint64((w*vCtlWords + k) * 8)) }

// ctlAt is the control word at offset off.
func (v *Provider) ctlAt(off uint64) *uint64 {
	return (*uint64)(unsafe.Pointer(&v.ctl.Bytes()[off]))
}

// putWord stores val in mr at offset off.
func putWord(mr *verbs.MR, off, val uint64) { binary.NativeEndian.PutUint64(mr.Bytes()[off:], val) }

// The words after the per-rank ones in the control memory, by index.
const (
	ctlSrc     = iota // what this process writes into a peer's words comes from here
	ctlBeat           // its heartbeat count, which peers read
	ctlFence          // set by a peer that declared this process failed
	ctlBell           // the doorbell: peers add one after writing a credit word (credits.go)
	ctlBellOut        // where the doorbell's old value lands when this process rings one
	ctlExtra
)

// ctlLen is the length of the control memory for a world of size.
func ctlLen(size int) int { return (size*vCtlWords + ctlExtra) * 8 }

// ctlOff is the offset of extra word k in the control memory of a world
// of size.
func ctlOff(size, k int) uint64 { return uint64((size*vCtlWords + k) * 8) }

// BeatWord is this process's heartbeat word, which peers read: memory
// that stays registered until Close.
func (v *Provider) BeatWord() *uint64 {
	return (*uint64)(unsafe.Pointer(&v.ctl.Bytes()[ctlOff(len(v.peers), ctlBeat)]))
}

// FenceWord is the word peers set when they declare this process failed.
func (v *Provider) FenceWord() *uint64 {
	return (*uint64)(unsafe.Pointer(&v.ctl.Bytes()[ctlOff(len(v.peers), ctlFence)]))
}

// Beat returns world rank w's heartbeat count as last read, with the
// time that read's completion was taken (zero before one completed: the
// count stood there at or before it), and starts the next read unless
// one is in flight — the peer's kernel answers it, whatever its process
// is doing. A read that fails fails the peer, as any completion does.
func (v *Provider) Beat(w int) (count uint64, at time.Time) {
	if !v.isPeer[w] {
		return 0, time.Time{}
	}
	p := v.peers[w]
	if p == nil || !p.ready {
		v.Connect(w)
		return 0, time.Time{}
	}
	if !p.beatBusy && !p.dead {
		v.sge[0] = verbs.SGE{MR: v.beats, Offset: uint64(w * 8), Length: 8}
		v.wr[0] = verbs.SendWR{ID: wrBeat | uint64(w), Op: verbs.OpRDMARead, Flags: verbs.Signaled, Local: v.sge[:],
			Remote: p.ctl.At(ctlOff(len(v.peers), ctlBeat))}
		if p.qp.PostSend(v.wr[:]...) == nil {
			p.beatBusy = true
		}
	}
	return p.beat, p.beatAt
}

// Fence carries out a verdict on world rank w: it sets w's fence word
// (so that w, if it still runs, ends itself) and then moves w's queue
// pair to the error state, so that nothing more passes either way.
func (v *Provider) Fence(w int) {
	p := v.peers[w]
	if p == nil || p.dead {
		return
	}
	p.dead = true
	if !p.connected || v.writeCtlAt(p, ctlOff(len(v.peers), ctlFence), 1, wrFence|uint64(w)) != nil {
		p.faulted = true // Poll puts its queue pair in error and its credits back
		v.dead = append(v.dead, peerFault{w, errFenced})
	}
}

// Send posts one frame to world rank peer, or returns false, posting
// nothing, when there is no room (or no connection yet: it starts one).
// For an RTS, payload is the whole message, which the peer will read.
func (v *Provider) Send(peer int, h *wire.Header, payload []byte) bool {
	p := v.peers[peer]
	if p == nil || !p.ready {
		v.Connect(peer)
		return false
	}
	if !v.canSend(p) {
		return false
	}
	addr, key := h.Addr, uint32(0)
	if h.Kind == wire.RTS {
		mr, off, err := v.mem.Lookup(v.pd, payload)
		if err != nil {
			v.dead = append(v.dead, peerFault{peer, err})
			return true
		}
		if mr == nil {
			// Staged once: a send retried for want of room keeps its copy.
			if mr = v.staged[h.ID]; mr == nil {
				if mr, err = v.getStage(len(payload)); err != nil {
					v.dead = append(v.dead, peerFault{peer, err})
					return true
				}
				copy(mr.Bytes(), payload)
				v.staged[h.ID] = mr
			}
			off = 0
		}
		addr, key = mr.Addr()+off, mr.RKey()
		payload = nil
	}
	hl := wire.VerbsLen(h)
	// A compact frame when it can be one (wire.Compact): the receiver
	// takes its source to be this process, and it carries no credits.
	imm, compact := uint32(0), false
	if h.Kind == wire.Eager && int(h.Src) == v.me && p.granted == p.told {
		if imm, compact = wire.Compact(h); compact {
			hl = 0
		}
	}
	n := hl + len(payload)
	var err error
	if n <= vInline {
		// Unsignaled, and straight from the header on the stack and the
		// caller's payload into the work request.
		var hb [wire.VerbsHeaderLen]byte
		if compact {
			err = p.qp.PostSendInlineImm(wrSend|vSendSlots, 0, imm, nil, payload)
		} else {
			wire.PutVerbs(hb[:hl], h, addr, key, p.granted)
			err = p.qp.PostSendInline(wrSend|vSendSlots, 0, hb[:hl], payload)
		}
	} else {
		if len(v.free) == 0 {
			return false
		}
		slot := v.free[len(v.free)-1]
		b := v.sendBuf.Bytes()[slot*vSlotSize : slot*vSlotSize+n]
		op := verbs.OpSendWithImm
		if !compact {
			op = verbs.OpSend
			wire.PutVerbs(b, h, addr, key, p.granted)
		}
		copy(b[hl:], payload)
		v.sge[0] = verbs.SGE{MR: v.sendBuf, Offset: uint64(slot * vSlotSize), Length: uint32(n)}
		v.wr[0] = verbs.SendWR{ID: wrSend | uint64(slot), Op: op, Imm: imm, Flags: verbs.Signaled, Local: v.sge[:]}
		if err = p.qp.PostSend(v.wr[:]...); err == nil {
			v.free = v.free[:len(v.free)-1]
		}
	}
	if err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return false
		}
		v.dead = append(v.dead, peerFault{peer, err})
		return true
	}
	p.sent++
	p.told = p.granted
	return true
}

// Read starts reading rendezvous message id of peer, at addr with key,
// into dst for receive r. It reports done when it ended at once (err says
// why); otherwise the engine hears of the end through ReadDone.
func (v *Provider) Read(peer int, r any, dst []byte, id, addr uint64, key uint32) (done bool, err error) {
	if len(v.freeReads) == 0 {
		// The table grows as needed (entries hold slices, not arrays, so
		// moving them moves nothing a posted request points into); the
		// send queues bound the reads actually in flight.
		v.reads = append(v.reads, vRead{})
		v.freeReads = append(v.freeReads, len(v.reads)-1)
	}
	i := v.freeReads[len(v.freeReads)-1]
	v.freeReads = v.freeReads[:len(v.freeReads)-1]
	rd := &v.reads[i]
	rd.r, rd.peer, rd.id, rd.dst, rd.stage = r, peer, id, dst, nil
	mr, off, err := v.mem.Lookup(v.pd, dst)
	if err == nil && mr == nil {
		mr, err = v.getStage(len(dst))
		rd.stage = mr
	}
	if err != nil {
		v.endRead(i)
		return true, err
	}
	// One read per chunk (ReadChunk, or more for a message of more than
	// maxReadWRs chunks, so that it fits the send queue at once); only
	// the last is signaled (a failed one completes anyway).
	chunk := max(v.rdChunk, min(v.maxMsg, (len(dst)+maxReadWRs-1)/maxReadWRs))
	k := (len(dst) + chunk - 1) / chunk
	rd.sges, rd.wrs = rd.sges[:0], rd.wrs[:0]
	for c := 0; c < k; c++ {
		lo := c * chunk
		n := min(chunk, len(dst)-lo)
		rd.sges = append(rd.sges, verbs.SGE{MR: mr, Offset: off + uint64(lo), Length: uint32(n)})
	}
	for c := 0; c < k; c++ {
		lo := uint64(c * chunk)
		rd.wrs = append(rd.wrs, verbs.SendWR{ID: wrRead | uint64(i), Op: verbs.OpRDMARead,
			Local: rd.sges[c : c+1], Remote: verbs.RemoteBuf{Addr: addr + lo, RKey: key, Len: uint64(rd.sges[c].Length)}})
	}
	rd.wrs[k-1].Flags = verbs.Signaled
	if err := v.postRead(i); err != nil {
		v.endRead(i)
		return true, err
	}
	return false, nil
}

// readPackets is how many packets one RDMA read asks for at most, and
// maxReadWRs how many reads one message takes at most (half a send
// queue). Fewer, longer reads move more: across the two kernels of an
// rxevm cluster, osu_bw moved 1.06–1.20× as much at 64 KiB–4 MiB with
// 64-packet reads as with 16-packet ones (lab/cross-node.sh), and more
// still with whole-message reads. What bounds them is loss. A lost
// packet costs a read far more than a write: a write's responder NAKs
// the gap at once, but a read's requester — soft-RoCE on Linux 6.1 at
// least — ignores the responses after a lost one until its transport
// timer fires, and its retry counter comes back only when a request
// completes, so a read spends a retry on every packet it loses (at 5 %
// loss, 256 KiB reads ran out of retries, a live peer lost to the NIC,
// where 16 KiB ones went through). A read of n packets at loss rate p
// loses about np of them: at 64 packets and 1 % (TestHostLoss), the
// chance that one read loses more than the 6 retries allow is about
// 5×10⁻⁷; a 1024-packet read would lose 10 on average.
const (
	readPackets = 64
	maxReadWRs  = vSQ / 2
)

// ReadChunk is the most one RDMA read asks for: larger reads are split
// (Read does; Endpoint.Get splits its own).
func (v *Provider) ReadChunk() int { return v.rdChunk }

func (v *Provider) postRead(i int) error {
	rd := &v.reads[i]
	err := v.peers[rd.peer].qp.PostSend(rd.wrs...)
	if errors.Is(err, verbs.ErrQueueFull) {
		v.deferred = append(v.deferred, i)
		return nil
	}
	return err
}

func (v *Provider) endRead(i int) {
	if st := v.reads[i].stage; st != nil {
		v.putStage(st)
	}
	rd := &v.reads[i]
	rd.r, rd.dst, rd.stage = nil, nil, nil
	v.freeReads = append(v.freeReads, i)
}

// Unstage drops the staged copy of rendezvous message id, which will not
// be sent after all.
func (v *Provider) Unstage(id uint64) {
	if mr := v.staged[id]; mr != nil {
		delete(v.staged, id)
		v.putStage(mr)
	}
}

// getStage returns a registered buffer of at least n bytes.
func (v *Provider) getStage(n int) (*verbs.MR, error) {
	c := max(16, bits.Len(uint(n-1)))
	if l := v.stages[c]; len(l) > 0 {
		mr := l[len(l)-1]
		v.stages[c] = l[:len(l)-1]
		v.kept -= mr.Len()
		return mr, nil
	}
	mr, err := v.pd.Alloc(1<<c, verbs.AccessAll)
	if err != nil {
		return nil, fmt.Errorf("verbs provider: staging %d bytes: %w", n, err)
	}
	return mr, nil
}

func (v *Provider) putStage(mr *verbs.MR) {
	if v.kept+mr.Len() > vStageKeep {
		mr.Close()
		return
	}
	c := bits.Len(uint(mr.Len() - 1))
	v.stages[c] = append(v.stages[c], mr)
	v.kept += mr.Len()
}

// Poll hands up to budget arrived frames to the engine and returns how
// many it handed over (failures count as one each). It leaves world rank
// direct's receives to TakeDirect (-1: none).
func (v *Provider) Poll(budget, direct int) int {
	for len(v.deferred) > 0 {
		i := v.deferred[0]
		if err := v.peers[v.reads[i].peer].qp.PostSend(v.reads[i].wrs...); err != nil {
			if errors.Is(err, verbs.ErrQueueFull) {
				break
			}
			v.readEnded(i, err)
		}
		v.deferred = v.deferred[1:]
	}
	v.doorbell()
	v.repostDue()
	got := v.drainSends(budget)
	// Receives: a few frames per peer per round, starting with a
	// different peer each time, so that one busy sender cannot starve the
	// others (their frames wait in their own queues, as on shm).
	n := len(v.byIx)
	start := v.next
	if v.next++; v.next >= n {
		v.next = 0
	}
	for k := 0; k < n && got < budget; k++ {
		i := start + k
		if i >= n {
			i -= n
		}
		if v.byIx[i].world == direct {
			continue // a blocking receive reads these itself
		}
		got += v.drainRecv(v.byIx[i], min(8, budget-got))
	}
	// Failures last, and each only once the peer's frames that arrived
	// before it are delivered: what a peer sent before it died (or said
	// goodbye) still counts.
	for len(v.dead) > 0 {
		f := v.dead[0]
		v.dead = v.dead[1:]
		if p := v.peers[f.peer]; p != nil {
			// Nothing more of its lands once its queue pair is in error;
			// what did is delivered, and its credits go back.
			if p.connected {
				p.qp.SetError()
			}
			for v.drainRecv(p, len(v.wcs)) > 0 {
			}
			v.release(p)
		}
		v.fail(f.peer, f.cause)
		got++
	}
	return got
}

// PollOneSided handles the completions on the queue where sends and
// one-sided operations complete, and returns how many it handled: what a
// flush waits for, without the rest of Poll.
func (v *Provider) PollOneSided() int { return v.drainSends(len(v.wcs)) }

// drainSends handles up to budget completions from the send CQs.
func (v *Provider) drainSends(budget int) int {
	got := 0
	for _, cq := range v.cqs {
		if got >= budget {
			break
		}
		got += v.drain(cq, min(budget-got, len(v.wcs)))
	}
	return got
}

// drain handles up to max completions from a send CQ.
func (v *Provider) drain(cq *verbs.CQ, max int) int {
	n, err := cq.Poll(v.wcs[:max])
	if err != nil {
		return 0
	}
	for k := 0; k < n; k++ {
		v.complete(&v.wcs[k], nil)
	}
	return n
}

// drainRecv handles up to max of p's receive completions.
func (v *Provider) drainRecv(p *link, max int) int {
	n, err := p.rcq.Poll(v.wcs[:max])
	if err != nil {
		return 0
	}
	for k := 0; k < n; k++ {
		v.complete(&v.wcs[k], p)
	}
	return n
}

// TakeDirect looks at world rank w's next frame, if one has arrived. If
// it is an eager message that matches (ctx, src, tag) and fits in buf, it
// copies the payload into buf and returns its length and tag with taken.
// Any other frame it handles as Poll would, and reports it with moved.
func (v *Provider) TakeDirect(w int, ctx uint32, src, tag int, buf []byte) (n, gotTag int, taken, moved bool) {
	p := v.peers[w]
	if p == nil {
		return 0, 0, false, false // not connected: nothing can have come
	}
	// As poll does. Here too, since a receive whose message is already
	// waiting returns without the general progress: the sender must not
	// run out of credits in a stream of those.
	v.repostDue()
	if k, err := p.rcq.Poll(v.wcs[:1]); k == 0 || err != nil {
		return 0, 0, false, false
	}
	wc := &v.wcs[0]
	if wc.Status == verbs.StatusSuccess && wc.ID&wrKindMask == wrRecv {
		critpath.Arrived()
		k := int(wc.ID &^ wrKindMask)
		b := v.frame(k, int(wc.ByteLen))
		var h wire.Header
		if hl, c, ok := v.header(p, wc, b, &h); ok && h.Kind == wire.Eager && h.Size <= uint64(len(buf)) && h.Matches(ctx, src, tag) {
			p.heard(c)
			copy(buf, b[hl:])
			v.take(p, k)
			return int(h.Size), int(h.Tag), true, true
		}
	}
	v.complete(wc, p)
	return 0, 0, false, true
}

// complete handles one work completion: of a receive from peer from, or
// from the send queues' CQ (from nil).
func (v *Provider) complete(wc *verbs.WorkCompletion, from *link) {
	i := int(wc.ID &^ wrKindMask)
	if wc.Status != verbs.StatusSuccess {
		switch wc.ID & wrKindMask {
		case wrRecv:
			if from != nil { // (only peers' queue pairs take receives)
				v.take(from, i) // a message cut short: its buffer goes back
			}
		case wrSend:
			if i < vSendSlots { // not an inline send, which holds no slot
				v.free = append(v.free, i)
			}
		case wrRead:
			v.readEnded(i, wc.Err())
		case wrOneSided:
			v.oneSided[i].link.oneSided.fail(wc.Err())
			v.oneSidedDone(i, false)
		case wrBeat:
			v.peers[i].beatBusy = false
		}
		if p := v.byQPN[wc.QPN]; p != nil && p != v.self && !p.faulted {
			p.dead, p.faulted = true, true // one report is enough; the QP is in error now
			v.dead = append(v.dead, peerFault{p.world, wc.Err()})
		}
		return
	}
	switch wc.ID & wrKindMask {
	case wrRecv:
		critpath.Arrived()
		v.received(from, i, wc)
	case wrSend:
		v.free = append(v.free, i)
	case wrRead:
		v.readEnded(i, nil)
	case wrOneSided:
		v.oneSided[i].link.oneSided.Done++
		v.oneSidedDone(i, true)
	case wrProbe:
		v.peers[i].probing = false
	case wrBeat:
		p := v.peers[i]
		p.beat, p.beatAt, p.beatBusy = binary.NativeEndian.Uint64(v.beats.Bytes()[i*8:]), time.Now(), false
	case wrFence:
		p := v.peers[i]
		p.qp.SetError()
		if !p.faulted { // its credits go back once in error (Poll)
			p.faulted = true
			v.dead = append(v.dead, peerFault{i, errFenced})
		}
	}
}

// header reads the header of frame b, which p sent and wc received: a
// compact frame's from the completion's immediate data (it tells no
// credits, so c is the count already heard from p), any other's from b.
func (v *Provider) header(p *link, wc *verbs.WorkCompletion, b []byte, h *wire.Header) (hl int, c uint32, ok bool) {
	if wc.Flags&verbs.WCWithImm != 0 {
		wire.GetCompact(wc.Imm, int32(p.world), len(b), h)
		return 0, p.limit, true
	}
	return wire.GetVerbs(b, h)
}

// received handles a frame from p in receive buffer k, received by wc.
func (v *Provider) received(p *link, k int, wc *verbs.WorkCompletion) {
	b := v.frame(k, int(wc.ByteLen))
	h := &v.h
	hl, c, ok := v.header(p, wc, b, h)
	if !ok {
		v.dead = append(v.dead, peerFault{p.world, fmt.Errorf("a %d-byte frame", len(b))})
		return
	}
	p.heard(c)
	switch h.Kind {
	case wire.FIN:
		v.Unstage(h.ID) // the peer has read it
		v.pl = wire.Payload{}
	case wire.Eager:
		v.pl = wire.Payload{Flat: b[hl:]}
	default:
		v.pl = wire.Payload{}
	}
	v.eng.Deliver(p.world, h, &v.pl)
	// The buffer is free again (deliver copied the frame out), but it is
	// posted later, with others (vRepostBatch): not between this frame and
	// whatever the process sends in answer to it.
	v.take(p, k)
}

// frame is the n bytes that arrived in receive buffer k.
func (v *Provider) frame(k, n int) []byte { return v.recv.Bytes()[k*vSlotSize : k*vSlotSize+n] }

// heard takes what a frame from p tells beyond its message: p's side is
// connected (it sends), and its granted count c for our frames.
func (p *link) heard(c uint32) {
	p.ready = true
	p.credit(c)
}

// ring writes val into our control word k at p and rings p's doorbell
// after it (the queue pair delivers them in that order).
func (v *Provider) ring(p *link, k int, val uint64) error {
	src := ctlOff(len(v.peers), ctlSrc)
	bell := ctlOff(len(v.peers), ctlBellOut)
	putWord(v.ctl, src, val)
	v.sge[0] = verbs.SGE{MR: v.ctl, Offset: src, Length: 8}
	v.bellSGE[0] = verbs.SGE{MR: v.ctl, Offset: bell, Length: 8}
	v.wr2[0] = verbs.SendWR{ID: wrCtl, Op: verbs.OpRDMAWrite, Flags: verbs.Inline, Local: v.sge[:],
		Remote: p.ctl.At(uint64((v.me*vCtlWords + k) * 8))}
	v.wr2[1] = verbs.SendWR{ID: wrCtl, Op: verbs.OpFetchAdd, Local: v.bellSGE[:], CompareAdd: 1,
		Remote: p.ctl.At(ctlOff(len(v.peers), ctlBell))}
	return p.qp.PostSend(v.wr2[:]...)
}

// post posts receive buffers bufs of the pool again, with one call.
func (v *Provider) post(bufs []int) error {
	for i, k := range bufs {
		v.postWR[i] = v.rwr[k]
	}
	return v.srq.PostRecv(v.postWR[:len(bufs)]...)
}

// word loads the control word k that world rank w writes here.
func (v *Provider) word(w, k int) uint64 { return atomic.LoadUint64(v.ctlWord(w, k)) }

// bell loads the doorbell peers ring after writing a control word.
func (v *Provider) bell() uint64 { return atomic.LoadUint64(v.ctlAt(ctlOff(len(v.peers), ctlBell))) }

// Pool reports how the receive pool stands; with the engine's lock held.
func (v *Provider) Pool() PoolStats {
	s := v.stats()
	s.Bytes = v.recv.Len()
	return s
}

// Link reports how the frames between this process and world rank w
// stand; false if w has no queue pair. With the engine's lock held.
func (v *Provider) Link(w int) (LinkStats, bool) {
	if w < 0 || w >= len(v.peers) || v.peers[w] == nil {
		return LinkStats{}, false
	}
	p := v.peers[w]
	return LinkStats{Sent: p.sent, Limit: p.limit, Burned: p.burned, Requests: p.requests, AskedAt: p.askedAt,
		Granted: p.granted, Told: p.told, Taken: p.taken, BurnSeen: p.burnSeen, Window: p.window,
		Waiting: p.starving, SendQueued: p.qp.SendQueued(), Dead: p.dead}, true
}

// writeCtl writes val into p's control word k for this process.
func (v *Provider) writeCtl(p *link, k int, val uint64) error {
	id := wrCtl
	if k == ctlGoodbye {
		id |= 1 // signaled: goodbye waits for it
	}
	return v.writeCtlAt(p, uint64((v.me*vCtlWords+k)*8), val, id)
}

// writeCtlAt writes val at offset off of p's control memory, signaled
// unless id is plain wrCtl.
func (v *Provider) writeCtlAt(p *link, off, val uint64, id uint64) error {
	srcOff := ctlOff(len(v.peers), ctlSrc)
	putWord(v.ctl, srcOff, val)
	v.sge[0] = verbs.SGE{MR: v.ctl, Offset: srcOff, Length: 8}
	v.wr[0] = verbs.SendWR{ID: id, Op: verbs.OpRDMAWrite, Flags: verbs.Inline, Local: v.sge[:], Remote: p.ctl.At(off)}
	if id != wrCtl {
		v.wr[0].Flags |= verbs.Signaled
	}
	return p.qp.PostSend(v.wr[:]...)
}

// ProbeEvery is how often a waiting process checks that its verbs peers
// are alive. A dead peer is noticed only by traffic to it failing (RC
// retransmissions running out); a process that waits for a message, or for
// a rendezvous FIN, sends nothing — so while it waits it sends each peer
// an empty RDMA write, which the peer's kernel acknowledges whatever its
// process is doing. A dead peer is then known within ProbeEvery plus the
// queue pair's failure bound.
const ProbeEvery = 100 * time.Millisecond

// Probe checks, at most every ProbeEvery, on the peers an operation
// waits for (Engine.WaitedOn).
func (v *Provider) Probe(now time.Time) {
	if now.Sub(v.probed) < ProbeEvery {
		return
	}
	v.probed = now
	// A peer this process waits for but has never talked to has no queue
	// pair to probe: connecting to it is the probe (a dead one refuses).
	v.eng.WaitedOn(v.waited)
	for w, yes := range v.waited {
		if yes && v.isPeer[w] && (v.peers[w] == nil || !v.peers[w].connected) {
			v.Connect(w)
		}
	}
	for _, p := range v.byIx {
		if p.probing || p.dead || !p.ready {
			continue
		}
		if v.Closed(p.world) {
			// It said goodbye: gone on purpose, and nothing to probe.
			v.dead = append(v.dead, peerFault{p.world, errors.New("goodbye received")})
			continue
		}
		v.wr[0] = verbs.SendWR{ID: wrProbe | uint64(p.world), Op: verbs.OpRDMAWrite, Flags: verbs.Signaled, Remote: p.ctl}
		if p.qp.PostSend(v.wr[:]...) == nil {
			p.probing = true
		}
	}
}

// readEnded finishes read i with err.
func (v *Provider) readEnded(i int, err error) {
	rd := v.reads[i]
	if err == nil && rd.stage != nil && !v.eng.Abandoned(rd.r) {
		copy(rd.dst, rd.stage.Bytes())
	}
	v.endRead(i)
	v.eng.ReadDone(rd.r, rd.peer, rd.id, err)
}

// fail records that world rank w cannot be reached, for cause: its
// queue pair failed, or no connection could be made.
func (v *Provider) fail(w int, cause error) {
	if p := v.peers[w]; p != nil {
		p.dead = true
	}
	if v.eng.Failed(w) {
		return
	}
	if !errors.Is(cause, ErrGone) && !errors.Is(cause, ErrNoRoute) {
		cause = fmt.Errorf("over %s: %w", v.dev.Name(), cause)
	}
	v.eng.Lost(w, v.Closed(w), cause)
}

// goodbyeWait bounds how long Goodbye waits for its writes to be
// acknowledged: well past an RC round trip, even between virtual machines
// on a loaded host, whose CPUs the host may hold for hundreds of
// milliseconds (it was 100 ms).
const goodbyeWait = time.Second

// Closed reports whether the peer said goodbye (Close) before going.
func (v *Provider) Closed(peer int) bool {
	if v.closing { // Close unmaps the control words
		return false
	}
	return atomic.LoadUint64(v.ctlWord(peer, ctlGoodbye)) == 1
}

// Goodbye tells every connected peer that this process is closing on
// purpose, and waits until the writes are acknowledged, for up to
// goodbyeWait: a peer on another node learns of a clean exit only from
// this word, and a goodbye lost with the queue pair torn down under it
// reads there as a failure. (A peer whose queue pair failed completes the
// write at once, flushed.)
func (v *Provider) Goodbye() {
	want := 0
	for _, p := range v.peers {
		if p != nil && p.connected && v.writeCtl(p, ctlGoodbye, 1) == nil {
			want++
		}
	}
	deadline := time.Now().Add(goodbyeWait)
	for want > 0 && time.Now().Before(deadline) {
		for _, cq := range v.cqs {
			n, err := cq.Poll(v.wcs[:])
			if err != nil {
				return
			}
			for k := 0; k < n; k++ {
				if v.wcs[k].ID == wrCtl|1 {
					want--
				}
			}
		}
	}
}

// Close releases everything the provider holds; WaitHandshakes then
// waits for the handshakes it ended.
func (v *Provider) Close() error {
	if v.self != nil {
		v.self.qp.Close()
	}
	if v.selfT != nil {
		v.selfT.Close()
	}
	v.closing = true
	if v.hsStop != nil {
		v.hsStop()
	}
	if v.ln != nil {
		v.ln.Close()
	}
	for c := range v.conns {
		c.Close()
	}
	for _, p := range v.byIx {
		p.close()
	}
	if v.srq != nil {
		v.srq.Close()
	}
	for _, mr := range v.staged {
		mr.Close()
	}
	for _, rd := range v.reads {
		if rd.stage != nil {
			rd.stage.Close()
		}
	}
	for _, o := range v.oneSided {
		if o.stage != nil {
			o.stage.Close()
		}
	}
	for _, l := range v.stages {
		for _, mr := range l {
			mr.Close()
		}
	}
	if v.mem != nil {
		v.mem.Deregister()
	}
	for _, mr := range []*verbs.MR{v.sendBuf, v.recv, v.ctl, v.atoms, v.beats} {
		if mr != nil {
			mr.Close()
		}
	}
	for _, cq := range v.cqs {
		cq.Close()
	}
	if v.events != nil {
		v.events.ch.Close()
	}
	if v.pd != nil {
		v.pd.Close()
	}
	if v.dev != nil {
		return v.dev.Close()
	}
	return nil
}

// QPError fails the peer whose queue pair qpn reported an async error;
// the next Poll hands the failure to the engine.
func (v *Provider) QPError(qpn uint32, cause error) {
	if p := v.byQPN[qpn]; p != nil && p != v.self {
		v.dead = append(v.dead, peerFault{p.world, cause})
	}
}

// DeviceFatal fails every peer with a queue pair: the device is lost.
func (v *Provider) DeviceFatal(cause error) {
	for _, p := range v.byIx {
		v.dead = append(v.dead, peerFault{p.world, cause})
	}
}

// QueuePairs lists the world ranks this process has made a queue pair
// for, in rank order: connections are made on first use.
func (v *Provider) QueuePairs() []int {
	var out []int
	for w, p := range v.peers {
		if p != nil {
			out = append(out, w)
		}
	}
	return out
}
