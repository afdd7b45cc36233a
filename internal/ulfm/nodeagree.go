package ulfm

// The node agreement: an agreement among the processes of a job on one
// node, through shared memory. Each member has a state word — the last
// attempt it published, shifted left by one, with the low bit set when a
// peer marked that attempt abandoned instead — and slots for its words.
// A member publishes attempt k by filling its slot and then moving its
// state word from the attempt before to k with a compare-and-swap. A
// member that knows a peer failed without publishing k moves the peer's
// state word to k|abandoned, with a compare-and-swap too: exactly one of
// the two wins, so either every member sees every contribution to k, or
// every member sees k abandoned, and the attempt falls back to the
// agreement over messages (Era), at every member alike.
//
// The machine is the protocol's decisions; the driver owns the memory
// (NodeWords) and the waiting between polls.

// NodeWords are the members' state words, by member index, as the
// driver holds them (atomic loads and compare-and-swaps on shared memory
// in production, plain words in a simulation).
type NodeWords interface {
	Load(member int) uint64
	CAS(member int, old, new uint64) bool
}

// NodeStatus is where a member's attempt stands.
type NodeStatus uint8

// The statuses.
const (
	NodeWaiting NodeStatus = iota // a peer has not published yet
	NodeDone                      // every member published: fold their slots
	NodeFell                      // abandoned: agree over messages instead
)

// NodeAgreement is one member's attempt k.
type NodeAgreement struct {
	w     NodeWords
	me, n int
	k     uint64
	next  int // members before next have published k
}

// NewNodeAgreement starts member me's attempt k (from 1, the same at
// every member; attempt k+1 only after k ended here) among n members.
func NewNodeAgreement(w NodeWords, me, n int, k uint64) *NodeAgreement {
	return &NodeAgreement{w: w, me: me, n: n, k: k}
}

// Publish makes this member's contribution visible, once its slot holds
// it (write fills the slot; it is not called when the contribution is
// published already, by an earlier call whose caller gave up waiting).
// It reports NodeFell when a peer abandoned the attempt for this member
// first (it held this member failed), NodeWaiting otherwise.
func (a *NodeAgreement) Publish(write func()) NodeStatus {
	old := a.w.Load(a.me)
	switch {
	case old>>1 < a.k:
		write()
		if !a.w.CAS(a.me, old, a.k<<1) {
			return NodeFell
		}
	case old == a.k<<1|1:
		return NodeFell
	}
	return NodeWaiting
}

// Poll looks at the peers' state words. failed reports whether a member
// is known failed; one that is and has not published k has the attempt
// abandoned for it. Poll reports NodeDone once every member published k.
func (a *NodeAgreement) Poll(failed func(member int) bool) NodeStatus {
	for ; a.next < a.n; a.next++ {
		s := a.w.Load(a.next)
		if s == a.k<<1|1 {
			return NodeFell
		}
		if s>>1 >= a.k {
			continue
		}
		if !failed(a.next) {
			return NodeWaiting
		}
		if a.w.CAS(a.next, s, a.k<<1|1) {
			return NodeFell
		}
		// It published meanwhile (or another member abandoned k): look
		// again.
		a.next--
	}
	return NodeDone
}

// Waiting is the member Poll waits for, or -1.
func (a *NodeAgreement) Waiting() int {
	if a.next >= a.n {
		return -1
	}
	return a.next
}
