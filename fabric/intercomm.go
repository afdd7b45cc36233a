//go:build linux

package fabric

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
)

// Root is what the root of a collective on an intercommunicator passes as
// root, and ProcNull what the other members of its group pass (MPI_ROOT);
// the members of the other group pass the root's rank in their remote
// group.
const Root = -3

// inter is what an intercommunicator holds beyond a Comm's fields. Its
// point-to-point traffic uses the Comm itself, whose ranks are the remote
// group's; its collectives combine the local group's own communicator and
// exchanges between the two groups' rank 0; its fault tolerance (revoke,
// agreement, shrink, the failed group) runs over the bridge, an
// intracommunicator of both groups that only this package and package ft
// use.
type inter struct {
	local  *Comm // the local group, with a context of its own
	bridge *Comm // both groups: the first, then the second
	first  bool  // the local group is the bridge's first
}

// The internal tags of intercommunicator creation and Merge (between the
// intra-communicator creation tags and CreateGroup's tag<<4 + 64).
const (
	tagInterMasks = 65 + iota
	tagInterLen
	tagInterGroup
	tagMergeHigh
	tagMergeID
)

// IsInter reports whether c is an intercommunicator
// (MPI_Comm_test_inter).
func (c *Comm) IsInter() bool { return c != nil && c.inter != nil }

// RemoteSize is the size of an intercommunicator's remote group
// (MPI_Comm_remote_size); 0 for an intracommunicator.
func (c *Comm) RemoteSize() int {
	if c.inter == nil {
		return 0
	}
	return len(c.ranks)
}

// RemoteGroup is an intercommunicator's remote group
// (MPI_Comm_remote_group); the empty group for an intracommunicator.
func (c *Comm) RemoteGroup() Group {
	if c.inter == nil {
		return Group{}
	}
	g, _ := NewGroup(c.ranks)
	return g
}

// Local is an intercommunicator's local group as an intracommunicator of
// its own (its own context: traffic on it never meets the
// intercommunicator's); nil for an intracommunicator. It lives and dies
// with c: Free and Revoke of c free and revoke it.
func (c *Comm) Local() *Comm {
	if c.inter == nil {
		return nil
	}
	return c.inter.local
}

// Bridge is the intracommunicator of both groups of intercommunicator c,
// the group with the lower leader first, over which c's revoke notices,
// agreements and shrinks travel (package ft); nil for an
// intracommunicator. It lives and dies with c. Programs use Merge.
func (c *Comm) Bridge() *Comm {
	if c.inter == nil {
		return nil
	}
	return c.inter.bridge
}

// LocalFirst reports whether an intercommunicator's local group comes
// first in its Bridge.
func (c *Comm) LocalFirst() bool { return c.inter != nil && c.inter.first }

// errInter is the error of a call an intercommunicator does not take.
func errInter(call string) error {
	return fmt.Errorf("%w: %s of an intercommunicator (Merge it first)", ErrComm, call)
}

// IntercommCreate makes an intercommunicator between c's group (the local
// group) and another group, disjoint from it (MPI_Intercomm_create). The
// two groups meet through peer, a communicator of which both leaders are
// members: localLeader, a rank in c, and remoteLeader, the other group's
// leader as a rank in peer. peer, remoteLeader and tag matter only at the
// local leader; its exchange with the remote leader travels on peer with
// tag, like a message of the program's, so tag must not match another
// message in flight between them. Collective over both groups.
func (c *Comm) IntercommCreate(ctx context.Context, localLeader int, peer *Comm, remoteLeader, tag int) (*Comm, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	if c.inter != nil {
		return nil, errInter("IntercommCreate")
	}
	if localLeader < 0 || localLeader >= c.Size() {
		return nil, fmt.Errorf("%w: local leader %d in a communicator of %d", ErrRank, localLeader, c.Size())
	}
	leader := c.rank == localLeader
	c.ep.createMu.Lock()
	defer c.ep.createMu.Unlock()

	// The local group's free ids (AND) and latest generation (MAX).
	c.ep.idMu.Lock()
	mask := c.ep.ids
	c.ep.idMu.Unlock()
	mine := make([]byte, len(mask)*8+8)
	putMask(mine, &mask, c.ep.lastGen)
	all, err := c.allgatherInternal(ctx, allRanks(c.Size()), tagInterMasks, mine)
	if err != nil {
		return nil, err
	}
	var and idMask
	gen := andMasks(&and, all)

	// The leaders trade their groups and what the groups agreed; each
	// leader hands the other's to its group.
	var theirs []byte
	if leader {
		var lerr error
		theirs, lerr = c.leaderExchange(ctx, peer, remoteLeader, tag, &and, gen)
		// The group hears either way: a length of 0 says it failed.
		var rn [8]byte
		binary.LittleEndian.PutUint64(rn[:], uint64(len(theirs)))
		var reqs []Request
		for r := range c.Size() {
			if r != c.rank {
				reqs = append(reqs, c.isend(rn[:], r, tagInterLen, c.ctxMgmt()))
				if lerr == nil {
					reqs = append(reqs, c.isend(theirs, r, tagInterGroup, c.ctxMgmt()))
				}
			}
		}
		if err := WaitAll(ctx, reqs, nil); lerr == nil && err != nil {
			lerr = err
		}
		if lerr != nil {
			return nil, lerr
		}
	} else {
		var rn [8]byte
		if _, err := c.recvInternal(ctx, rn[:], localLeader, tagInterLen); err != nil {
			return nil, err
		}
		size := binary.LittleEndian.Uint64(rn[:])
		if size == 0 {
			return nil, fmt.Errorf("fabric: IntercommCreate: the local leader (rank %d) did not reach the remote group", localLeader)
		}
		if size < interHead+8 || size > interHead+8*maxGroup || size%8 != 0 {
			return nil, fmt.Errorf("%w: IntercommCreate: the leader sent a group description of %d bytes", ErrInvalid, size)
		}
		theirs = make([]byte, size)
		if _, err := c.recvInternal(ctx, theirs, localLeader, tagInterGroup); err != nil {
			return nil, err
		}
	}

	// Both groups now hold the same two descriptions.
	var rand idMask
	rgen := andMasks(&rand, [][]byte{theirs[:interHead-8]})
	remote := make([]int, (len(theirs)-interHead)/8)
	for i := range remote {
		remote[i] = int(binary.LittleEndian.Uint64(theirs[interHead+8*i:]))
		if remote[i] < 0 || remote[i] >= c.ep.size {
			return nil, fmt.Errorf("%w: IntercommCreate: the remote group names world rank %d", ErrGroup, remote[i])
		}
	}
	rl := binary.LittleEndian.Uint64(theirs[interHead-8:])
	if rl >= uint64(len(remote)) {
		return nil, fmt.Errorf("%w: IntercommCreate: the remote leader is rank %d of %d", ErrRank, rl, len(remote))
	}
	if _, err := NewGroup(remote); err != nil {
		return nil, fmt.Errorf("IntercommCreate: the remote group: %w", err)
	}
	for _, w := range remote {
		if c.fromWorld(w) >= 0 {
			return nil, fmt.Errorf("%w: IntercommCreate: world rank %d is in both groups", ErrGroup, w)
		}
	}
	for i := range and {
		and[i] &= rand[i]
	}
	first := c.ranks[localLeader] < remote[rl]
	return c.ep.makeInter(c.ranks, remote, first, &and, max(gen, rgen))
}

// interHead is the fixed part of a group's description in
// IntercommCreate: its free ids (AND), latest generation (MAX) and
// leader's rank, before its members' world ranks in rank order.
const interHead = maxContextIDs/64*8 + 16

// leaderExchange trades the local group's description with the remote
// leader over peer and returns the remote group's.
func (c *Comm) leaderExchange(ctx context.Context, peer *Comm, remoteLeader, tag int, and *idMask, gen uint64) ([]byte, error) {
	if err := peer.valid(); err != nil {
		return nil, fmt.Errorf("fabric: IntercommCreate's peer communicator: %w", err)
	}
	if peer.inter != nil {
		return nil, errInter("the peer communicator")
	}
	if err := peer.checkDest(remoteLeader, tag); err != nil || remoteLeader == ProcNull || remoteLeader == peer.rank {
		return nil, fmt.Errorf("%w: remote leader %d (tag %d) in a peer communicator of %d where this process is %d", ErrRank, remoteLeader, tag, peer.Size(), peer.rank)
	}
	msg := make([]byte, interHead+8*c.Size())
	putMask(msg, and, gen)
	binary.LittleEndian.PutUint64(msg[interHead-8:], uint64(c.rank))
	for i, w := range c.ranks {
		binary.LittleEndian.PutUint64(msg[interHead+8*i:], uint64(w))
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(msg)))
	sends := []Request{peer.isend(n[:], remoteLeader, tag, peer.ctxUser()), peer.isend(msg, remoteLeader, tag, peer.ctxUser())}
	var rn [8]byte
	if _, err := peer.Recv(ctx, rn[:], remoteLeader, tag); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(rn[:])
	if size < interHead+8 || size > interHead+8*maxGroup || size%8 != 0 {
		return nil, fmt.Errorf("%w: IntercommCreate: the remote leader sent a group description of %d bytes", ErrInvalid, size)
	}
	theirs := make([]byte, size)
	if _, err := peer.Recv(ctx, theirs, remoteLeader, tag); err != nil {
		return nil, err
	}
	if err := WaitAll(ctx, sends, nil); err != nil {
		return nil, err
	}
	return theirs, nil
}

// maxGroup bounds the groups an intercommunicator description may name.
const maxGroup = 1 << 20

func putMask(b []byte, m *idMask, gen uint64) {
	for i, w := range m {
		binary.LittleEndian.PutUint64(b[i*8:], w)
	}
	binary.LittleEndian.PutUint64(b[len(m)*8:], gen)
}

// andMasks sets and to the AND of the masks in all (nil entries left
// out) and returns their largest generation.
func andMasks(and *idMask, all [][]byte) uint64 {
	for i := range and {
		and[i] = ^uint64(0)
	}
	gen := uint64(0)
	for _, b := range all {
		if b == nil {
			continue
		}
		for i := range and {
			and[i] &= binary.LittleEndian.Uint64(b[i*8:])
		}
		gen = max(gen, binary.LittleEndian.Uint64(b[len(and)*8:]))
	}
	return gen
}

// recvInternal receives on c's management context.
func (c *Comm) recvInternal(ctx context.Context, buf []byte, src, tag int) (Status, error) {
	r := c.irecv(buf, src, tag, c.ctxMgmt())
	return r.Wait(ctx)
}

// makeInter makes the three communicators of an intercommunicator —
// itself, its local group's and the bridge — with the three lowest ids
// free in and, one generation past gen; with createMu held.
func (ep *Endpoint) makeInter(local, remote []int, first bool, and *idMask, gen uint64) (*Comm, error) {
	var ids [3]uint32
	for i := range ids {
		id, ok := and.lowest()
		if !ok {
			for _, id := range ids[:i] {
				ep.releaseID(id)
			}
			return nil, fmt.Errorf("fabric: all %d context ids are in use", maxContextIDs)
		}
		and[id/64] &^= 1 << (id % 64)
		ep.idMu.Lock()
		free := ep.ids[id/64]&(1<<(id%64)) != 0
		ep.ids[id/64] &^= 1 << (id % 64)
		ep.idMu.Unlock()
		if !free {
			return nil, fmt.Errorf("%w: the agreed context id %d is in use here", ErrInvalid, id)
		}
		ids[i] = id
	}
	gen++
	ep.lastGen = max(ep.lastGen, gen)
	both := slices.Concat(local, remote)
	if !first {
		both = slices.Concat(remote, local)
	}
	lc := newComm(ep, ids[2], gen, slices.Clone(local))
	bridge := newComm(ep, ids[1], gen, both)
	c := &Comm{ep: ep, e: ep.e, id: ids[0], gen: gen, ctxBase: ctxOf(ids[0], gen), ranks: slices.Clone(remote), index: make([]int, ep.size), rank: lc.rank,
		inter: &inter{local: lc, bridge: bridge, first: first}}
	for i := range c.index {
		c.index[i] = -1
	}
	for i, w := range remote {
		c.index[w] = i
	}
	e := ep.e
	e.mu.Lock()
	c.links = []*Comm{lc, bridge}
	lc.links = []*Comm{c, bridge}
	bridge.links = []*Comm{c, lc}
	e.register(c)
	// A revoke that reached one of the three before the others existed
	// (kept, and applied when it was registered) applies to all.
	for _, x := range []*Comm{c, lc, bridge} {
		if x.revoked.Load() {
			for _, l := range x.links {
				e.revoke(l, x.revokeHops)
			}
		}
	}
	e.mu.Unlock()
	return c, nil
}

// Merge makes an intracommunicator of both groups of intercommunicator c
// (MPI_Intercomm_merge): the group whose members pass high false comes
// first, each group in its own order; if both pass the same, the group
// with the lower leader (by world rank) comes first. Every member of a
// group passes the same high. Collective over both groups.
func (c *Comm) Merge(ctx context.Context, high bool) (*Comm, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	if c.inter == nil {
		return nil, fmt.Errorf("%w: Merge of an intracommunicator", ErrComm)
	}
	b := c.inter.bridge
	c.ep.createMu.Lock()
	defer c.ep.createMu.Unlock()
	var h [1]byte
	if high {
		h[0] = 1
	}
	all, err := b.allgatherInternal(ctx, allRanks(b.Size()), tagMergeHigh, h[:])
	if err != nil {
		return nil, err
	}
	// The first group's high is its rank 0's, the second's its rank 0's.
	n1 := c.Size()
	if !c.inter.first {
		n1 = len(c.ranks)
	}
	firstHigh, secondHigh := all[0][0] == 1, all[n1][0] == 1
	ranks := slices.Clone(b.ranks)
	if firstHigh && !secondHigh {
		ranks = slices.Concat(b.ranks[n1:], b.ranks[:n1])
	}
	id, gen, err := b.agreeID(ctx, allRanks(b.Size()), tagMergeID)
	if err != nil {
		return nil, err
	}
	return newComm(c.ep, id, gen, ranks), nil
}

// createAgreedInter is CreateAgreed of an intercommunicator: agree's
// members are ranks in the bridge, and the survivors of each group make
// the new intercommunicator's groups, in their order.
func (c *Comm) createAgreedInter(ctx context.Context, agree IDAgreement) (*Comm, error) {
	b := c.inter.bridge
	c.ep.createMu.Lock()
	defer c.ep.createMu.Unlock()
	members, all, gen, err := c.ep.agreeIDs(ctx, agree)
	if err != nil {
		return nil, err
	}
	seen := make([]bool, b.Size())
	var local, remote []int
	for _, r := range members {
		if r < 0 || r >= b.Size() || seen[r] {
			return nil, fmt.Errorf("%w: member %d of %d (or twice)", ErrRank, r, b.Size())
		}
		seen[r] = true
		if w := b.ranks[r]; c.inter.local.fromWorld(w) >= 0 {
			local = append(local, w)
		} else {
			remote = append(remote, w)
		}
	}
	if b.rank < 0 || !seen[b.rank] {
		return nil, fmt.Errorf("%w: this process (rank %d) is not among the agreed members", ErrRank, b.rank)
	}
	if len(remote) == 0 {
		return nil, fmt.Errorf("%w: every process of the remote group failed", ErrGroup)
	}
	var and idMask
	copy(and[:], all)
	return c.ep.makeInter(local, remote, c.inter.first, &and, gen)
}
