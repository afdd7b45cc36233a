//go:build linux

package fabric

import (
	"context"
	"fmt"
	"slices"
)

// IDAgreement is how CreateAgreed learns a new communicator's members,
// context id and generation from a protocol outside this package
// (package ft's agreement). It is given this process's free context ids
// (a bit per id, set while free) and the latest communicator generation
// it made, and returns, identically at every member of the new
// communicator: the members (ranks in the old one, in their order
// there), the bitwise AND of every member's free mask, and the largest
// generation.
type IDAgreement func(ctx context.Context, free []uint64, gen uint64) (members []int, freeAll []uint64, genMax uint64, err error)

// CreateAgreed makes a communicator of some of c's members with the
// members, context id and generation agree settles — the way a shrink
// makes its survivors' communicator without any collective that a
// failure could break (package ft's Shrink). The id is the lowest one
// free at all the members, and the generation one more than any of
// theirs. It works on a revoked c. On an intercommunicator, the members
// are ranks in its Bridge, and the result is the intercommunicator of
// each group's members.
func (c *Comm) CreateAgreed(ctx context.Context, agree IDAgreement) (*Comm, error) {
	if c == nil || c.freed.Load() {
		return nil, c.invalid()
	}
	if agree == nil {
		return nil, fmt.Errorf("%w: nil IDAgreement", ErrInvalid)
	}
	if c.inter != nil {
		return c.createAgreedInter(ctx, agree)
	}
	c.ep.createMu.Lock()
	defer c.ep.createMu.Unlock()
	members, all, gen, err := c.ep.agreeIDs(ctx, agree)
	if err != nil {
		return nil, err
	}
	seen := make([]bool, c.Size())
	ranks := make([]int, len(members))
	for i, r := range members {
		if r < 0 || r >= c.Size() || seen[r] {
			return nil, fmt.Errorf("%w: member %d of %d (or twice)", ErrRank, r, c.Size())
		}
		seen[r] = true
		ranks[i] = c.ranks[r]
	}
	if c.rank < 0 || !seen[c.rank] {
		return nil, fmt.Errorf("%w: this process (rank %d) is not among the agreed members", ErrRank, c.rank)
	}
	var and idMask
	copy(and[:], all)
	id, ok := and.lowest()
	if !ok {
		return nil, fmt.Errorf("fabric: all %d context ids are in use", maxContextIDs)
	}
	c.ep.idMu.Lock()
	free := c.ep.ids[id/64]&(1<<(id%64)) != 0
	c.ep.ids[id/64] &^= 1 << (id % 64)
	c.ep.idMu.Unlock()
	if !free {
		return nil, fmt.Errorf("%w: the agreed context id %d is in use here (the agreement was not an AND of the members' masks)", ErrInvalid, id)
	}
	c.ep.lastGen = max(c.ep.lastGen, gen+1)
	return newComm(c.ep, id, gen+1, ranks), nil
}

// agreeIDs runs agree with this process's free context ids and latest
// generation, and checks the mask it settles; with createMu held.
func (ep *Endpoint) agreeIDs(ctx context.Context, agree IDAgreement) (members []int, all []uint64, gen uint64, err error) {
	ep.idMu.Lock()
	mask := ep.ids
	ep.idMu.Unlock()
	members, all, gen, err = agree(ctx, slices.Clone(mask[:]), ep.lastGen)
	if err == nil && len(all) != len(mask) {
		err = fmt.Errorf("%w: the agreed context-id mask has %d words, want %d", ErrInvalid, len(all), len(mask))
	}
	return members, all, gen, err
}
