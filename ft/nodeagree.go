//go:build linux

package ft

import (
	"context"
	"os"

	"github.com/rivet-hpc/rivet/internal/nodecoll"
	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// agree runs one blocking agreement on h's communicator and returns its
// decided record and value. The record is nil when the agreement went
// through shared memory, where every member contributed: nothing failed
// before contributing, and no one is known failed from it. The value is
// valid until the next agreement on h. On the world communicator of a job on one
// node it agrees through shared memory (nodecoll.Agree): every member
// publishes its value, and once all have, each combines them alike —
// a cache-line hand-off per member, where the agreement over messages
// takes two messages per member. A member that fails without publishing
// makes every member fall back to the agreement over messages (ERA), with
// the same agreement number: each attempt reserves one, used or not, so
// the numbering stays the same at every member whichever way each went.
// Nonblocking agreements always go over messages.
func (h *handler) agree(ctx context.Context, val []uint64, ops []ulfm.Op, acked []int) (*ulfm.Agreement, []uint64, error) {
	if nodecoll.Agree == nil || noNodeAgree || len(val) > nodecoll.AgreeWords {
		return h.agreeMsgs(ctx, 0, val, ops, acked)
	}
	h.mu.Lock()
	left := h.nodeLeft
	h.mu.Unlock()
	if left != nil {
		// A node attempt must end here before the next one starts (its
		// slot is refilled two attempts on).
		select {
		case <-left:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	h.mu.Lock()
	if h.nodeLeft == left {
		h.nodeLeft = nil
	}
	seq := h.e.Reserve()
	h.nodeK++
	k := h.nodeK
	h.mu.Unlock()
	h.nodeOps, h.nodeAcc = ops, h.nodeAcc[:0]
	served, fell, err := nodecoll.Agree(ctx, h.c, k, val, h.nodeFold)
	switch {
	case !served:
		return h.agreeMsgs(ctx, seq, val, ops, acked)
	case err != nil && ctx.Err() != nil:
		// The contribution is published: finish the attempt in the
		// background, so that members that fall back get this one's
		// contribution over messages too.
		left := make(chan struct{})
		h.mu.Lock()
		h.nodeLeft = left
		h.mu.Unlock()
		go func() {
			defer close(left)
			h.nodeAcc = h.nodeAcc[:0]
			served, fell, err := nodecoll.Agree(context.Background(), h.c, k, val, h.nodeFold)
			switch {
			case !served || err != nil: // the endpoint closed
			case fell:
				h.mu.Lock()
				h.e.EnterAt(seq, val, ops, acked)
				h.mu.Unlock()
			default:
				h.mu.Lock()
				h.e.DecidedHere(seq)
				h.mu.Unlock()
			}
		}()
		return nil, nil, err
	case err != nil:
		return nil, nil, err
	case fell:
		return h.agreeMsgs(ctx, seq, val, ops, acked)
	}
	h.mu.Lock()
	h.e.DecidedHere(seq)
	h.mu.Unlock()
	return nil, h.nodeAcc, nil
}

// fold combines a member's words into the node attempt's value.
func (h *handler) fold(_ int, in []uint64) {
	if len(h.nodeAcc) == 0 {
		h.nodeAcc = append(h.nodeAcc, in...)
		return
	}
	for i, o := range h.nodeOps {
		h.nodeAcc[i] = o.Combine(h.nodeAcc[i], in[i])
	}
}

// AgreeEnv chooses the path of the blocking agreements on the world
// communicator of a one-node job: "messages" keeps them on ERA over
// messages, as every other agreement is; unset or "auto" lets them go
// through shared memory. Every process of the job must see the same
// value (a member on messages would leave the others waiting in shared
// memory), so it is read once, from the environment the launcher gives
// them all.
const AgreeEnv = "RIVET_FT_AGREE"

// noNodeAgree keeps every agreement on messages (AgreeEnv).
var noNodeAgree = os.Getenv(AgreeEnv) == "messages"

// agreeMsgs is an agreement over messages: the one reserved as seq, or
// with seq 0 (agreements count from 1) the next.
func (h *handler) agreeMsgs(ctx context.Context, seq uint64, val []uint64, ops []ulfm.Op, acked []int) (*ulfm.Agreement, []uint64, error) {
	h.mu.Lock()
	if seq == 0 {
		seq = h.e.Reserve()
	}
	a := h.e.EnterAt(seq, val, ops, acked)
	h.mu.Unlock()
	out, err := h.wait(ctx, a)
	return a, out, err
}
