//go:build linux

package ft

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/nodecoll"
	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// Op is how Agree combines the contributed values.
type Op int

// The operations an agreement can combine with; all are idempotent, as
// the protocol needs (a contribution may arrive twice by a repaired path).
const (
	BAnd Op = iota // bitwise AND: MPI_Comm_agree's
	BOr            // bitwise OR
	Min            // the least value
	Max            // the greatest value
)

func (o Op) String() string {
	switch o {
	case BAnd:
		return "band"
	case BOr:
		return "bor"
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Agree agrees with the other members of c on flag and on the group of
// failed processes (MPI_COMM_AGREE): it returns the bitwise AND of the
// flags of every member that contributed — every member not known
// failed, and maybe some that failed afterwards.
//
// If a process failed before it contributed and not every member had
// acknowledged that failure (Comm.AckFailed) when it called Agree, Agree
// returns the value with an error matching fabric.ErrProcFailed — at
// every member alike. Afterwards c.GetFailed names every process that did
// not contribute. Agree works on a revoked communicator and never returns
// fabric.ErrRevoked. It is collective: the members call their agreements
// on c in the same order.
//
// A member returns as soon as it holds the decision (the early-returning
// agreement, ERA); the decision is kept to answer members that have not,
// as long as any call on this process makes progress — a Detector does,
// every tick.
//
// Which path an agreement takes: on the world communicator of a job on
// one node, the blocking agreements (Agree, AgreeOp, Shrink's) go
// through shared memory, falling back to ERA when a member fails
// meanwhile; everywhere else — a Dup or any other communicator, a job
// across nodes, IAgree — they are ERA over messages. A test that means to exercise ERA on one node
// runs its job with RIVET_FT_AGREE=messages (AgreeEnv), or agrees on a
// Dup of the world (docs/ft.md).
func Agree(ctx context.Context, c *fabric.Comm, flag int) (int, error) {
	return AgreeOp(ctx, c, flag, BAnd)
}

// oneOp holds each Op's ulfm.Op, for one-word agreements to slice.
var oneOp = [...]ulfm.Op{ulfm.And, ulfm.Or, ulfm.Min, ulfm.Max}

// AgreeOp is Agree combining with op.
func AgreeOp(ctx context.Context, c *fabric.Comm, value int, op Op) (int, error) {
	if op < BAnd || op > Max {
		return 0, fmt.Errorf("%w: agreement operation %v", fabric.ErrInvalid, op)
	}
	h, err := handlerOf(c)
	if err != nil {
		return 0, err
	}
	val, ops, pick := contribute(c, value, op)
	a, out, err := h.agree(ctx, val, ops, ackedRanks(c))
	if err != nil {
		return 0, err
	}
	if a == nil { // through shared memory: every member contributed
		return int(int64(out[pick])), nil
	}
	return int(int64(out[pick])), h.outcome(a)
}

// contribute is what a member of c contributes to an agreement on value
// with op, and which word of the decision is its answer. On an
// intercommunicator the agreement runs over both groups (its Bridge),
// each group's values combined in a word of their own, and a member's
// answer is the other group's word (MPI 4.1 §16.3.1: the AND "over the
// values contributed by the remote group"); a group with no survivor
// leaves its word at op's identity.
func contribute(c *fabric.Comm, value int, op Op) (val []uint64, ops []ulfm.Op, pick int) {
	v := uint64(int64(value))
	if !c.IsInter() {
		return []uint64{v}, oneOp[op : op+1], 0
	}
	id := [...]uint64{^uint64(0), 0, uint64(math.MaxInt64), 1 << 63}[op] // BAnd, BOr, Min, Max
	if c.LocalFirst() {
		return []uint64{v, id}, []ulfm.Op{oneOp[op], oneOp[op]}, 1
	}
	return []uint64{id, v}, []ulfm.Op{oneOp[op], oneOp[op]}, 0
}

// IAgree starts an agreement (MPI_COMM_IAGREE); its request's Wait or
// Test gives what Agree returns.
func IAgree(c *fabric.Comm, flag int) (*AgreeRequest, error) {
	return IAgreeOp(c, flag, BAnd)
}

// IAgreeOp is IAgree combining with op.
func IAgreeOp(c *fabric.Comm, value int, op Op) (*AgreeRequest, error) {
	if op < BAnd || op > Max {
		return nil, fmt.Errorf("%w: agreement operation %v", fabric.ErrInvalid, op)
	}
	h, err := handlerOf(c)
	if err != nil {
		return nil, err
	}
	acked := ackedRanks(c)
	val, ops, pick := contribute(c, value, op)
	a := h.enter(val, ops, acked)
	return &AgreeRequest{h: h, a: a, pick: pick}, nil
}

// AgreeRequest is an agreement in progress (IAgree).
type AgreeRequest struct {
	h    *handler
	a    *ulfm.Agreement
	pick int // the word of the decision that is the answer (contribute)
	done bool
	val  int
	err  error
}

// Wait waits until the agreement is decided, or ctx ends, and returns
// what Agree returns. Once decided, Wait returns the same again.
func (r *AgreeRequest) Wait(ctx context.Context) (int, error) {
	if r.done {
		return r.val, r.err
	}
	vals, err := r.h.wait(ctx, r.a)
	if err != nil {
		return 0, err
	}
	r.done, r.val = true, int(int64(vals[r.pick]))
	r.err = r.h.outcome(r.a)
	return r.val, r.err
}

// Test makes a round of progress and reports whether the agreement is
// decided, and if so what Agree returns.
func (r *AgreeRequest) Test() (done bool, flag int, err error) {
	if !r.done {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // one round, then return
		if _, err := r.Wait(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return true, 0, err
		}
	}
	return r.done, r.val, r.err
}

// ackedRanks is the comm ranks of the failures this process has
// acknowledged on c, and of the members it acknowledged closed: neither
// contributes, and either, acknowledged by every member, makes an
// agreement raise no more.
func ackedRanks(c *fabric.Comm) []int {
	if c.IsInter() {
		c = c.Bridge() // (where its agreements run)
	}
	n, closed := c.AckFailed(0), c.AckedClosed()
	if n == 0 && len(closed) == 0 {
		return nil
	}
	g := c.Group()
	var out []int
	for i, w := range c.GetFailed().Members() {
		if i >= n {
			break
		}
		out = append(out, g.RankOf(w))
	}
	for _, w := range closed {
		out = append(out, g.RankOf(w))
	}
	return out
}

// handler is a communicator's fault-tolerance channel as package ft
// uses it: its agreements.
type handler struct {
	c  *fabric.Comm
	mu sync.Mutex // order: the engine's lock, then mu
	e  *ulfm.Era

	// Node agreements (nodeagree.go): the last attempt, the one a
	// caller whose ctx ended left to finish in the background, and the
	// fold that combines the members' words (one attempt at a time).
	nodeK    uint64
	nodeLeft chan struct{}
	nodeOps  []ulfm.Op
	nodeAcc  []uint64
	nodeFold func(rank int, words []uint64)
}

var handlerMu sync.Mutex // makes the first handler of a communicator once

// handlerOf returns c's handler, setting it on first use.
func handlerOf(c *fabric.Comm) (*handler, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil communicator", fabric.ErrComm)
	}
	if c.IsInter() {
		c = c.Bridge() // an intercommunicator agrees over both groups
	}
	if h, ok := c.FTHandler().(*handler); ok {
		return h, nil // (set once, never changed)
	}
	handlerMu.Lock()
	defer handlerMu.Unlock()
	switch h := c.FTHandler().(type) {
	case *handler:
		return h, nil
	case nil:
	default:
		return nil, fmt.Errorf("%w: the communicator's fault-tolerance channel has another handler (%T)", fabric.ErrInvalid, h)
	}
	if c.Rank() < 0 {
		return nil, fmt.Errorf("%w: this process is not a member", fabric.ErrComm)
	}
	h := &handler{c: c, nodeAcc: make([]uint64, 0, nodecoll.AgreeWords)}
	h.nodeFold = h.fold
	h.e = ulfm.NewEra(c.Size(), c.Rank(), ulfm.Arity, func(dest, tag int, b []byte) error { return c.SendFT(dest, tag, b) })
	if err := c.SetFTHandler(h); err != nil {
		return nil, err
	}
	return h, nil
}

// FTMessage implements fabric.FTHandler.
func (h *handler) FTMessage(src, tag int, payload []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.e.Message(src, tag, payload)
}

// FTFailed implements fabric.FTHandler.
func (h *handler) FTFailed(r int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.e.Fail(r)
}

func (h *handler) enter(val []uint64, ops []ulfm.Op, acked []int) *ulfm.Agreement {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.e.Enter(val, ops, acked)
}

// enterAt enters the agreement reserved as seq.
func (h *handler) enterAt(seq uint64, val []uint64, ops []ulfm.Op, acked []int) *ulfm.Agreement {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.e.EnterAt(seq, val, ops, acked)
}

// wait makes progress until a is decided and returns its value.
func (h *handler) wait(ctx context.Context, a *ulfm.Agreement) ([]uint64, error) {
	var err error
	werr := h.c.WaitFT(ctx, func() bool {
		h.mu.Lock()
		err = a.Err()
		st, words := a.State(), len(a.Value())
		h.mu.Unlock()
		if testHookWait != nil {
			testHookWait(a.Seq(), st, words)
		}
		return st == ulfm.Decided || err != nil
	})
	if werr != nil {
		return nil, werr
	}
	if err != nil {
		return nil, err
	}
	return a.Value(), nil
}

// outcome makes what a decided agreement says of failures this
// process's knowledge: every process its contributors knew failed is
// marked failed here (so GetFailed names every process that did not
// contribute), and the error, if it raised one.
func (h *handler) outcome(a *ulfm.Agreement) error {
	h.mu.Lock()
	var dead []int
	all := a.Dead()
	for _, r := range all {
		if !h.e.Failed(r) {
			dead = append(dead, r)
		}
	}
	failed := a.Raised()
	h.mu.Unlock()
	if len(dead) > 0 {
		ep, g := h.c.Endpoint(), h.c.Group()
		for _, r := range dead {
			if w, err := g.WorldRank(r); err == nil {
				ep.MarkFailed(w, errAgreedFailed)
			}
		}
	}
	if failed {
		var stopped []int // closed their endpoints: not in GetFailed
		ep, g := h.c.Endpoint(), h.c.Group()
		for _, r := range all {
			if w, err := g.WorldRank(r); err == nil && ep.State(w) == fabric.Stopped {
				stopped = append(stopped, w)
			}
		}
		if len(stopped) > 0 {
			return fmt.Errorf("%w: ft: agreement: a process failed or closed its endpoint that not every member had acknowledged (failed: %v; closed: world ranks %v)", fabric.ErrProcFailed, h.c.GetFailed().Members(), stopped)
		}
		return fmt.Errorf("%w: ft: agreement: a process failed that not every member had acknowledged (failed: %v)", fabric.ErrProcFailed, h.c.GetFailed().Members())
	}
	return nil
}

// testHookWait, if set, sees the state of the agreement a process waits
// for, each time it looks — after each round of progress, which sends
// what the last look queued.
var testHookWait func(seq uint64, state ulfm.State, words int)

// errAgreedFailed is the cause of a failure this process learned from an
// agreement's decision.
var errAgreedFailed = errors.New("ft: failed, as an agreement decided")

// uniformity is the agreement of package fabric's error-uniformity keys.
type uniformity struct{}

func (uniformity) Agree(ctx context.Context, c *fabric.Comm, flag int) (int, error) {
	return Agree(ctx, c, flag)
}

func (uniformity) Reserve(c *fabric.Comm) (fabric.Contribution, error) {
	h, err := handlerOf(c)
	if err != nil {
		return nil, err
	}
	acked := ackedRanks(c)
	h.mu.Lock()
	defer h.mu.Unlock()
	return &contribution{r: AgreeRequest{h: h}, seq: h.e.Reserve(), acked: acked}, nil
}

// contribution is a reserved agreement, a BAnd of flags, whose flag
// comes at a nonblocking collective's completion. The failures it
// acknowledges are those acknowledged when the collective started.
type contribution struct {
	r     AgreeRequest
	seq   uint64
	acked []int
}

func (x *contribution) Contribute(flag int) {
	x.r.a = x.r.h.enterAt(x.seq, []uint64{uint64(int64(flag))}, []ulfm.Op{ulfm.And}, x.acked)
}

func (x *contribution) Decided() bool {
	if x.r.a == nil {
		return false
	}
	x.r.h.mu.Lock()
	defer x.r.h.mu.Unlock()
	return x.r.a.State() == ulfm.Decided || x.r.a.Err() != nil
}

func (x *contribution) Wait(ctx context.Context) (int, error) {
	if x.r.a == nil {
		return 0, fmt.Errorf("%w: ft: an agreement waited for before its contribution", fabric.ErrInvalid)
	}
	return x.r.Wait(ctx)
}

// The error-uniformity keys of package fabric agree with Agree.
func init() {
	fabric.SetAgreement(uniformity{})
}
