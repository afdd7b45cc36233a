//go:build linux

package fabric

import (
	"context"
	"fmt"
	"slices"
)

// The exchanges a communicator's creation makes among its members — the
// context-id masks (agreeID), the colors and keys of a Split, the
// records of a spawn — go up a binomial tree to the first member and back
// down: O(log n) messages per member and O(n log n) in all. They were an
// exchange between every two members, n² messages, and in shared memory
// a ring for every pair: at 256 processes on one node a Dup took 170 ms,
// and every process held 255 rings.
//
// A member that cannot hear from a child or from its parent (the peer
// failed, the context ended) still sends on, marked failed, so that no
// member waits for one that will not send; every member then returns an
// error, its own or ErrProcFailed. Whether a creation succeeded
// everywhere is settled after, as before (uniformCreate).

// treeOf is member i's place in the binomial tree over n members rooted
// at member 0: its parent (-1 at the root) and its children, nearest
// first. Child c's subtree is the members from c to c+lowbit(c).
func treeOf(i, n int) (parent int, children []int) {
	parent = -1
	for mask := 1; mask < n; mask <<= 1 {
		if i&mask != 0 {
			return i - mask, children
		}
		if i+mask < n {
			children = append(children, i+mask)
		}
	}
	return parent, children
}

// subtree is how many members the subtree of member c of n holds.
func subtree(c, n int) int {
	if c == 0 {
		return n
	}
	return min(c&-c, n-c)
}

// Tree message status, its first byte.
const (
	treeOK     = 0
	treeFailed = 1
)

// treeRecv receives a tree message of len(body) bytes from member m into
// body; ok says it came, and was not marked failed.
func (c *Comm) treeRecv(ctx context.Context, m, tag int, msg []byte) (bool, error) {
	st, err := c.recvInternal(ctx, msg, m, tag)
	switch {
	case err != nil:
		return false, err
	case st.Count != len(msg):
		return false, fmt.Errorf("%w: an internal exchange of %d bytes got %d from rank %d", ErrMismatch, len(msg), st.Count, m)
	}
	return msg[0] == treeOK, nil
}

// treeSend sends msg, its status byte set from ok, to member m.
func (c *Comm) treeSend(ctx context.Context, m, tag int, msg []byte, ok bool) error {
	msg[0] = treeOK
	if !ok {
		msg[0] = treeFailed
	}
	r := c.isend(msg, m, tag, c.ctxMgmt())
	_, err := r.Wait(ctx)
	return err
}

// treeError is what a member that saw no failure itself returns when the
// tree says one happened.
func treeError() error {
	return procFailed("a member of the communicator failed during an internal exchange")
}

// treeAllreduce folds every member's buf into every member's buf: fold(acc,
// in) combines in into acc, and must be associative and commutative.
// members are ranks in c, each member passing the same list and equal
// lengths; tag tells concurrent exchanges apart.
func (c *Comm) treeAllreduce(ctx context.Context, members []int, tag int, buf []byte, fold func(acc, in []byte)) error {
	me := slices.Index(members, c.rank)
	if me < 0 {
		return fmt.Errorf("%w: rank %d is not among the members of an internal exchange", ErrInvalid, c.rank)
	}
	parent, children := treeOf(me, len(members))
	msg := make([]byte, 1+len(buf))
	var first error
	ok := true
	for _, ch := range children {
		got, err := c.treeRecv(ctx, members[ch], tag, msg)
		if err != nil && first == nil {
			first = err
		}
		if ok = ok && got; ok {
			fold(buf, msg[1:])
		}
	}
	if parent >= 0 {
		copy(msg[1:], buf)
		if err := c.treeSend(ctx, members[parent], tag, msg, ok); err != nil && first == nil {
			first = err
		}
		got, err := c.treeRecv(ctx, members[parent], tag, msg)
		if err != nil && first == nil {
			first = err
		}
		if ok = got; ok {
			copy(buf, msg[1:])
		}
	}
	copy(msg[1:], buf)
	for _, ch := range children {
		if err := c.treeSend(ctx, members[ch], tag, msg, ok); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	if !ok {
		return treeError()
	}
	return nil
}

// allgatherInternal exchanges one value among the members (ranks in c;
// every member passing the same list and values of one length) and
// returns them indexed by rank, nil for ranks not among them: up the tree
// each member sends its subtree's values, in member order, and the whole
// table comes back down.
func (c *Comm) allgatherInternal(ctx context.Context, members []int, tag int, mine []byte) ([][]byte, error) {
	n, l := len(members), len(mine)
	me := slices.Index(members, c.rank)
	if me < 0 {
		return nil, fmt.Errorf("%w: rank %d is not among the members of an internal exchange", ErrInvalid, c.rank)
	}
	parent, children := treeOf(me, n)
	// table holds the values of members me… in member order: this
	// subtree's on the way up, everyone's (from 0) on the way down.
	table := make([]byte, 1+n*l)
	copy(table[1+me*l:], mine)
	var first error
	ok := true
	for _, ch := range children {
		msg := table[ch*l : (ch+subtree(ch, n))*l+1] // its status byte borrows the value before
		keep := msg[0]
		got, err := c.treeRecv(ctx, members[ch], tag, msg)
		msg[0] = keep
		if err != nil && first == nil {
			first = err
		}
		ok = ok && got
	}
	if parent >= 0 {
		up := table[me*l : (me+subtree(me, n))*l+1]
		keep := up[0]
		if err := c.treeSend(ctx, members[parent], tag, up, ok); err != nil && first == nil {
			first = err
		}
		up[0] = keep
		got, err := c.treeRecv(ctx, members[parent], tag, table)
		if err != nil && first == nil {
			first = err
		}
		ok = got
	}
	for _, ch := range children {
		if err := c.treeSend(ctx, members[ch], tag, table, ok); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	if !ok {
		return nil, treeError()
	}
	out := make([][]byte, c.Size())
	for i, m := range members {
		out[m] = table[1+i*l : 1+(i+1)*l : 1+(i+1)*l]
	}
	return out, nil
}
