//go:build linux

package fabric

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync/atomic"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// Special ranks and tags.
const (
	// AnySource receives from any rank (MPI_ANY_SOURCE).
	AnySource = -1
	// AnyTag receives any tag (MPI_ANY_TAG).
	AnyTag = -1
	// ProcNull is a rank that sends and receives nothing, at once
	// (MPI_PROC_NULL).
	ProcNull = -2
	// MaxTag is the largest tag (MPI_TAG_UB).
	MaxTag = 1<<30 - 1
)

// Comm is a communicator: a group of processes and a communication
// context of their own, so that traffic on one never matches receives on
// another (MPI_Comm). Methods may be called from several goroutines; MPI's
// ordering guarantee holds between the calls of one goroutine.
type Comm struct {
	ep      *Endpoint
	e       *engine
	id      uint32 // context id: its traffic matches on ctxBase+0 (user), +1 (management), +2 (collectives), +3 (fault tolerance)
	gen     uint64 // generation: the id's makes, told apart (revoke notices name both)
	ctxBase uint32 // ctxOf(id, gen)
	rank    int
	ranks   []int // comm rank -> world rank
	index   []int // world rank -> comm rank, or -1
	freed   atomic.Bool

	collSeq     atomic.Int64             // schedules started: the next one's tag
	epoch       uint64                   // node barriers entered (world only)
	slotEpoch   uint64                   // node allreduces entered (world only)
	chunkSeq    uint64                   // chunks of chunked node allreduces (world only)
	spare       atomic.Pointer[Schedule] // the last finished schedule, for the next
	acked       int                      // failures of members acknowledged (AckFailed); under e.mu
	ackedClosed []int                    // world ranks of members acknowledged closed (AckedClosed); under e.mu

	errRange   ErrorRange   // SetErrorRange; under e.mu
	errUniform atomic.Int32 // an ErrorUniform (SetErrorUniform); read by every blocking collective, so not under e.mu
	ft         ftState      // the fault-tolerance channel (SetFTHandler, SendFT)
	revoked    atomic.Bool  // set under e.mu (revoke)
	revokeHops int          // the fewest hops a revoke notice came in: 0 revoked here, -1 none (learned from an operation); under e.mu
	revokeN    ulfm.Notices // the revoke's broadcast, this member's part; under e.mu

	inter *inter  // an intercommunicator's parts (intercomm.go); nil for an intracommunicator
	links []*Comm // revoked and freed with this one: an intercommunicator's parts
}

// Endpoint returns the endpoint c belongs to.
func (c *Comm) Endpoint() *Endpoint { return c.ep }

func newComm(ep *Endpoint, id uint32, gen uint64, ranks []int) *Comm {
	c := &Comm{ep: ep, e: ep.e, id: id, gen: gen, ctxBase: ctxOf(id, gen), ranks: ranks, index: make([]int, ep.size), rank: -1}
	for i := range c.index {
		c.index[i] = -1
	}
	for i, w := range ranks {
		c.index[w] = i
		if w == ep.rank {
			c.rank = i
		}
	}
	c.e.mu.Lock()
	c.e.register(c)
	c.e.mu.Unlock()
	return c
}

// Rank is this process's rank in the communicator (in an
// intercommunicator's local group).
func (c *Comm) Rank() int { return c.rank }

// Size is the number of processes in the communicator (in an
// intercommunicator's local group: see RemoteSize).
func (c *Comm) Size() int {
	if c.inter != nil {
		return c.inter.local.Size()
	}
	return len(c.ranks)
}

// Group returns the communicator's group (MPI_Comm_group): an
// intercommunicator's local group.
func (c *Comm) Group() Group {
	if c.inter != nil {
		return c.inter.local.Group()
	}
	g, _ := NewGroup(c.ranks)
	return g
}

// contextID is the communicator's context id, unique among the
// communicators any one process belongs to; for logs and tests.
func (c *Comm) contextID() uint32 { return c.id }

// The matching contexts of a communicator: user point-to-point, the
// fabric's own management traffic (communicator creation), and schedules
// (collectives), so that none can match another's messages.
func (c *Comm) ctxUser() uint32 { return c.ctxBase }
func (c *Comm) ctxMgmt() uint32 { return c.ctxBase + 1 }
func (c *Comm) ctxColl() uint32 { return c.ctxBase + 2 }

// ctxOf is the base of the matching contexts of the communicator with
// context id id and generation gen: the id, and above it the low bits of
// the generation. A context id is reused once freed; the generation
// keeps a message left over from its previous communicator — one a
// failure kept from being received, say — from matching the next one's
// traffic.
func ctxOf(id uint32, gen uint64) uint32 {
	return uint32(gen&(1<<ctxGenBits-1))<<ctxGenShift | id<<2
}

const (
	ctxGenShift = 14 // above 2 bits of context kind and 12 of id (maxContextIDs)
	ctxGenBits  = 32 - ctxGenShift
)

// ctxCommID is the context id of matching context ctx.
func ctxCommID(ctx uint32) uint32 { return ctx >> 2 & (maxContextIDs - 1) }

// ctxFT is the fault-tolerance context's offset: agreement and shrink
// talk on it, and a revoke does not stop it.
const ctxFT = 3

func (c *Comm) fromWorld(w int) int {
	if w < 0 || w >= len(c.index) {
		return -1
	}
	return c.index[w]
}

// valid reports why c cannot be used, or nil. The reason is made out of
// line, so that the common case is a few loads and no further call.
func (c *Comm) valid() error {
	if !c.usable() {
		return c.invalid()
	}
	return nil
}

// usable is valid's test, small enough to be inlined into the argument
// checks of every call.
func (c *Comm) usable() bool { return c != nil && !c.freed.Load() && !c.ep.closed.Load() }

func (c *Comm) invalid() error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: nil", ErrComm)
	case c.freed.Load():
		return fmt.Errorf("%w: used after Free", ErrComm)
	}
	return ErrClosed
}

// Free releases the communicator (MPI_Comm_free); using it afterwards is
// an error. Operations already started complete normally. Free is local
// and never waits for other members. If package ft used the
// communicator's fault-tolerance channel (an agreement, a shrink), the
// channel goes on answering: members that have not yet returned from an
// agreement this process has may still need its decision (the newest 256
// such channels are kept, until Endpoint.Close). The world and self
// communicators are freed by Endpoint.Close, not here. Freeing an
// intercommunicator frees its Local and Bridge communicators too.
func (c *Comm) Free() error {
	if err := c.valid(); err != nil {
		return err
	}
	if c == c.ep.world || c == c.ep.self {
		return fmt.Errorf("%w: the world and self communicators are freed by Endpoint.Close", ErrComm)
	}
	if c.inter == nil && len(c.links) > 0 {
		return fmt.Errorf("%w: a part of an intercommunicator is freed with it", ErrComm)
	}
	for _, x := range append([]*Comm{c}, c.links...) {
		x.e.mu.Lock()
		if x.freed.Swap(true) {
			x.e.mu.Unlock()
			return fmt.Errorf("%w: freed twice", ErrComm)
		}
		x.e.unregister(x)
		x.e.mu.Unlock()
		x.ep.releaseID(x.id)
	}
	return nil
}

// Dup is a new communicator with the same group and a new context
// (MPI_Comm_dup). Collective over c.
func (c *Comm) Dup(ctx context.Context) (*Comm, error) {
	nc, err := c.dup(ctx)
	return c.uniformCreate(ctx, nc, err)
}

func (c *Comm) dup(ctx context.Context) (*Comm, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	if c.inter != nil {
		return nil, errInter("Dup")
	}
	c.ep.createMu.Lock()
	defer c.ep.createMu.Unlock()
	id, gen, err := c.agreeID(ctx, allRanks(c.Size()), tagDup)
	if err != nil {
		return nil, err
	}
	return newComm(c.ep, id, gen, slices.Clone(c.ranks)), nil
}

// Split partitions c by color: processes passing the same color get a
// communicator together, ranked by key and then by their rank in c
// (MPI_Comm_split). A negative color (Undefined) gets nil. Collective
// over c.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	nc, err := c.split(ctx, color, key)
	return c.uniformCreate(ctx, nc, err)
}

func (c *Comm) split(ctx context.Context, color, key int) (*Comm, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	if c.inter != nil {
		return nil, errInter("Split")
	}
	if color < 0 {
		color = Undefined
	}
	c.ep.createMu.Lock()
	defer c.ep.createMu.Unlock()
	var mine [16]byte
	binary.LittleEndian.PutUint64(mine[:], uint64(int64(color)))
	binary.LittleEndian.PutUint64(mine[8:], uint64(int64(key)))
	all, err := c.allgatherInternal(ctx, allRanks(c.Size()), tagSplit, mine[:])
	if err != nil {
		return nil, err
	}
	id, gen, err := c.agreeID(ctx, allRanks(c.Size()), tagSplit+1)
	if err != nil {
		return nil, err
	}
	if color == Undefined {
		c.ep.releaseID(id)
		return nil, nil
	}
	type member struct{ key, rank int }
	var ms []member
	for r, b := range all {
		if int(int64(binary.LittleEndian.Uint64(b))) == color {
			ms = append(ms, member{int(int64(binary.LittleEndian.Uint64(b[8:]))), r})
		}
	}
	slices.SortStableFunc(ms, func(a, b member) int {
		if a.key != b.key {
			return a.key - b.key
		}
		return a.rank - b.rank
	})
	ranks := make([]int, len(ms))
	for i, m := range ms {
		ranks[i] = c.ranks[m.rank]
	}
	return newComm(c.ep, id, gen, ranks), nil
}

// Create is the communicator of group g, a subset of c's group
// (MPI_Comm_create); processes outside g get nil. Collective over c, and
// every process must pass the same group.
func (c *Comm) Create(ctx context.Context, g Group) (*Comm, error) {
	nc, err := c.create(ctx, g)
	return c.uniformCreate(ctx, nc, err)
}

func (c *Comm) create(ctx context.Context, g Group) (*Comm, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	if err := c.subgroup(g); err != nil {
		return nil, err
	}
	c.ep.createMu.Lock()
	defer c.ep.createMu.Unlock()
	id, gen, err := c.agreeID(ctx, allRanks(c.Size()), tagCreate)
	if err != nil {
		return nil, err
	}
	if g.RankOf(c.ep.rank) == Undefined {
		c.ep.releaseID(id)
		return nil, nil
	}
	return newComm(c.ep, id, gen, g.Members()), nil
}

// CreateGroup is Create collective over g's members only
// (MPI_Comm_create_group): processes outside g do not take part. tag
// tells apart concurrent creations over overlapping groups.
func (c *Comm) CreateGroup(ctx context.Context, g Group, tag int) (*Comm, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	if err := c.subgroup(g); err != nil {
		return nil, err
	}
	if tag < 0 || tag > MaxTag>>4 {
		return nil, fmt.Errorf("%w: %d (CreateGroup takes 0..%d)", ErrTag, tag, MaxTag>>4)
	}
	if g.RankOf(c.ep.rank) == Undefined {
		return nil, fmt.Errorf("%w: this process is not in the group", ErrGroup)
	}
	members := make([]int, g.Size())
	for i, w := range g.members {
		members[i] = c.index[w]
	}
	c.ep.createMu.Lock()
	defer c.ep.createMu.Unlock()
	id, gen, err := c.agreeID(ctx, members, tagCreateGroup+tag<<4)
	if err != nil {
		return nil, err
	}
	return newComm(c.ep, id, gen, g.Members()), nil
}

func (c *Comm) subgroup(g Group) error {
	if c.inter != nil {
		return errInter("Create")
	}
	if g.Size() == 0 {
		return fmt.Errorf("%w: empty", ErrGroup)
	}
	for _, w := range g.members {
		if c.fromWorld(w) < 0 {
			return fmt.Errorf("%w: world rank %d is not in the communicator", ErrGroup, w)
		}
	}
	return nil
}

func allRanks(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// Internal tags on a communicator's internal context.
const (
	tagDup = 1 + iota*4
	tagSplit
	tagCreate
	tagCreateGroup = 64
)

// Context ids: a bit per id, set while free. A new communicator's id is
// the lowest id free at every member (the AND of their masks), so it never
// collides with a communicator any member already has — MPICH's scheme.
const maxContextIDs = 4096

type idMask [maxContextIDs / 64]uint64

func (m *idMask) lowest() (uint32, bool) {
	for i, w := range m {
		if w != 0 {
			return uint32(i*64 + bits.TrailingZeros64(w)), true
		}
	}
	return 0, false
}

// agreeID agrees on a fresh context id with the members (ranks in c),
// and on its generation: one more than the latest any member has made,
// so that a communicator that reuses an id is told apart from every
// earlier one any of its members had.
func (c *Comm) agreeID(ctx context.Context, members []int, tag int) (uint32, uint64, error) {
	c.ep.idMu.Lock()
	mask := c.ep.ids
	c.ep.idMu.Unlock()
	// The ids free at every member (the masks ANDed) and the newest
	// generation any member has seen (their maximum).
	buf := make([]byte, len(mask)*8+8)
	for i, w := range mask {
		binary.LittleEndian.PutUint64(buf[i*8:], w)
	}
	binary.LittleEndian.PutUint64(buf[len(mask)*8:], c.ep.lastGen)
	err := c.treeAllreduce(ctx, members, tag, buf, func(acc, in []byte) {
		for i := 0; i < len(mask)*8; i += 8 {
			binary.LittleEndian.PutUint64(acc[i:], binary.LittleEndian.Uint64(acc[i:])&binary.LittleEndian.Uint64(in[i:]))
		}
		g := len(mask) * 8
		binary.LittleEndian.PutUint64(acc[g:], max(binary.LittleEndian.Uint64(acc[g:]), binary.LittleEndian.Uint64(in[g:])))
	})
	if err != nil {
		return 0, 0, err
	}
	gen := binary.LittleEndian.Uint64(buf[len(mask)*8:]) + 1
	c.ep.lastGen = gen
	var and idMask
	for i := range and {
		and[i] = binary.LittleEndian.Uint64(buf[i*8:])
	}
	id, ok := and.lowest()
	if !ok {
		return 0, 0, fmt.Errorf("fabric: all %d context ids are in use", maxContextIDs)
	}
	c.ep.idMu.Lock()
	c.ep.ids[id/64] &^= 1 << (id % 64)
	c.ep.idMu.Unlock()
	return id, gen, nil
}
