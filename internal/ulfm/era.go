package ulfm

import (
	"encoding/binary"
	"hash/fnv"
	"math/bits"
	"slices"
)

// The agreement protocol: ERA, the early-returning agreement of Herault
// et al. (SC'15) as Open MPI's coll/ftagree implements it, on a tree of
// arity k over the communicator's ranks (root rank 0, children ki+1 to
// ki+k) repaired lazily from what each process knows of failures:
//
//   - a process's parent is its nearest ancestor not known failed; the
//     root is the lowest-ranked process not known failed, and the other
//     processes all of whose ancestors failed become its children;
//   - a process gathers the contributions (UP) of its children, then
//     sends the combined value UP to its parent; the root decides and the
//     decision goes DOWN the tree;
//   - a process whose parent fails sends its contribution again to its
//     new parent; one that becomes the root asks its new children for
//     theirs (REQ), and any of them that already has the decision answers
//     with it (DOWN), so a decision outlives the root that made it;
//   - a process returns once it has the decision, and keeps it to answer
//     the late (an UP or a REQ for a decided agreement gets a DOWN) until
//     every process has moved past it.
//
// Contributions are combined with idempotent operations (AND, OR, MIN,
// MAX), so a contribution that reaches a process twice, by a repaired
// path, changes nothing. Alongside the value travel: whether a failure
// was seen that not every contributor had acknowledged (the error the
// agreement raises), the union of the failures the contributors knew
// (which every process marks failed before it returns, so that GET_FAILED
// afterwards names every process that did not contribute), and the
// newest agreement every contributor had finished (which bounds what may
// be forgotten).
//
// The protocol assumes what the failure detector enforces: a process
// known failed has stopped (it is fenced out, and its messages dropped).

// The messages' tags on the communicator's fault-tolerance channel.
const (
	TagUp   = 1 // a subtree's contribution
	TagDown = 2 // the decision
	TagReq  = 3 // a new root's request for contributions (or the decision)
)

// Op combines agreement values. Every one is idempotent, as the protocol
// needs.
type Op uint8

// The operations.
const (
	And Op = iota // bitwise AND
	Or            // bitwise OR
	Min           // the least, of int64 values
	Max           // the greatest, of int64 values
)

// Combine is a combined with b.
func (o Op) Combine(a, b uint64) uint64 {
	switch o {
	case And:
		return a & b
	case Or:
		return a | b
	case Min:
		return uint64(min(int64(a), int64(b)))
	case Max:
		return uint64(max(int64(a), int64(b)))
	}
	return a
}

// State is where an agreement stands at one process.
type State uint8

// The states of an agreement at one process.
const (
	NotEntered   State = iota // heard of, not contributed to
	Gathering                 // waiting for its children's contributions
	Broadcasting              // contributed to its parent; waiting for the decision
	Decided
)

// Send is how a machine sends payload to rank dest with tag. It must not
// call back into the machine.
type Send func(dest, tag int, payload []byte) error

// Agreement is one agreement (one seq) at one process. Its methods may
// be called only where the Era's may (under the driver's lock).
type Agreement struct {
	seq   uint64
	state State

	ops      []Op
	val      []uint64
	raised   bool    // a failure not every contributor had acknowledged
	dead     rankSet // failed, as some contributor knew
	ackCount int
	ackHash  uint64
	gc       uint64 // every contributor had decided every agreement up to it

	gathered   rankSet // contributions in val (this process's own among them)
	upTo       int     // the parent the contribution went to
	restarted  bool    // became the root after contributing to a parent
	asked      rankSet // sent a REQ
	requesters rankSet // get the decision directly
	pending    []pendingUp

	err error // the agreement could not go on (a message could not be sent)

	local bool // decided by other means (DecidedHere)
}

type pendingUp struct {
	src int
	msg []byte
}

// Seq is the agreement's number on its communicator, from 1.
func (a *Agreement) Seq() uint64 { return a.seq }

// State is where the agreement stands here.
func (a *Agreement) State() State { return a.state }

// Value is the decided value, one word a word of the contributions; the
// caller must not change it.
func (a *Agreement) Value() []uint64 { return a.val }

// Raised reports whether the decision raises: a process failed that not
// every contributor had acknowledged (or contributors acknowledged
// different failures).
func (a *Agreement) Raised() bool { return a.raised }

// Dead is the union of the failures the contributors knew, in rank
// order: every process that did not contribute is in it.
func (a *Agreement) Dead() []int { return a.dead.ints() }

// Err is why the agreement cannot go on here — a message the send
// function refused — or nil.
func (a *Agreement) Err() error { return a.err }

// Era is one communicator's agreements at one process.
type Era struct {
	n, me int
	k     int // the tree's arity
	send  Send

	failed bitset  // known failed
	known  rankSet // the same, as a list

	next    uint64 // the seq of the next agreement this process enters
	recs    map[uint64]*Agreement
	gcBelow uint64 // agreements before it are forgotten
	done    uint64 // every agreement up to it is decided here

	buf  []byte
	kids []int
}

// Arity is the agreement tree's: each process gathers from up to 8
// children, so up to 9 processes it is a star (one hop up, one down), and
// 4096 are 4 levels deep — fewer hops than ERA's default binary tree.
// (On a node, with more ranks than CPUs, the two measured alike: there
// an agreement's time goes to waiting for CPUs, docs/performance.md.)
const Arity = 8

// NewEra makes the agreements of process me of a communicator of n, on
// a tree of arity k (Arity unless a test says otherwise), sending with
// send.
func NewEra(n, me, k int, send Send) *Era {
	return &Era{n: n, me: me, k: k, send: send, failed: newBitset(n), next: 1, recs: map[uint64]*Agreement{}, gcBelow: 1}
}

// Size is the communicator's size.
func (e *Era) Size() int { return e.n }

// Failed reports whether rank r is known failed here.
func (e *Era) Failed(r int) bool { return r >= 0 && r < e.n && e.failed.has(r) }

// Known is the ranks known failed here, in rank order.
func (e *Era) Known() []int { return e.known.ints() }

// Held is how many agreements this process still keeps a record of.
func (e *Era) Held() int { return len(e.recs) }

// The tree. Ranks are tree indices: the parent of i is (i-1)/k.

// ancestor is i's nearest ancestor not known failed, or -1.
func (e *Era) ancestor(i int) int {
	for i > 0 {
		i = (i - 1) / e.k
		if !e.failed.has(i) {
			return i
		}
	}
	return -1
}

// root is the lowest rank not known failed (all its ancestors, lower
// ranks, are): the root of the repaired tree.
func (e *Era) root() int { return e.failed.firstClear(e.n) }

// Parent is rank i's parent in the tree as repaired by what this process
// knows; the root is its own.
func (e *Era) Parent(i int) int {
	if a := e.ancestor(i); a >= 0 {
		return a
	}
	return e.root()
}

// children appends i's children in the repaired tree to out: the
// processes whose nearest live ancestor it is, and, for the root, the
// other processes with no live ancestor.
func (e *Era) children(i int, out []int) []int {
	if i == e.root() {
		out = e.tops(0, i, out)
	}
	for c := e.k*i + 1; c <= e.k*i+e.k; c++ {
		out = e.tops(c, -1, out)
	}
	return out
}

// tops appends the live processes of j's subtree (j included) that have
// no live ancestor within it, except skip.
func (e *Era) tops(j, skip int, out []int) []int {
	if j >= e.n {
		return out
	}
	if !e.failed.has(j) {
		if j != skip {
			out = append(out, j)
		}
		return out
	}
	for c := e.k*j + 1; c <= e.k*j+e.k; c++ {
		out = e.tops(c, skip, out)
	}
	return out
}

// rec finds or makes the record of agreement seq.
func (e *Era) rec(seq uint64) *Agreement {
	a := e.recs[seq]
	if a == nil {
		a = &Agreement{seq: seq, upTo: -1}
		e.recs[seq] = a
	}
	return a
}

// ackKey summarizes a set of acknowledged failures (comm ranks) for
// comparison: its size and an FNV-1a hash of its sorted members, the same
// at every process.
func ackKey(acked []int) (int, uint64) {
	s := slices.Clone(acked)
	slices.Sort(s)
	s = slices.Compact(s)
	h := fnv.New64a()
	var b [4]byte
	for _, r := range s {
		binary.LittleEndian.PutUint32(b[:], uint32(r))
		h.Write(b[:])
	}
	return len(s), h.Sum64()
}

// Enter starts this process's part in the next agreement: its value,
// the combining operation of each word (the same at every process), and
// the failures it acknowledges (ranks).
func (e *Era) Enter(val []uint64, ops []Op, acked []int) *Agreement {
	return e.EnterAt(e.Reserve(), val, ops, acked)
}

// Reserve takes the next agreement's seq for a contribution made later
// (EnterAt): members reserve in one order and may enter in another.
func (e *Era) Reserve() uint64 {
	seq := e.next
	e.next++
	return seq
}

// EnterAt is Enter for the reserved agreement seq.
func (e *Era) EnterAt(seq uint64, val []uint64, ops []Op, acked []int) *Agreement {
	a := e.rec(seq)
	a.state = Gathering
	a.ops = ops
	a.val = slices.Clone(val)
	a.gathered.add(e.me)
	a.ackCount, a.ackHash = ackKey(acked)
	a.gc = e.done
	for _, p := range a.pending {
		e.combine(a, p.src, p.msg)
	}
	a.pending = nil
	e.check(a)
	return a
}

// DecidedHere records the reserved agreement seq as decided by other
// means — through shared memory, at every member alike — so that it
// counts towards done. No message will concern it: it is forgotten once
// done has passed it (at once, when it is the next).
func (e *Era) DecidedHere(seq uint64) {
	if seq == e.done+1 && e.recs[seq] == nil {
		e.done++
		e.advanceDone()
		return
	}
	a := e.rec(seq)
	a.state, a.local = Decided, true
	a.pending = nil
	e.advanceDone()
}

// advanceDone moves done past the agreements decided here.
func (e *Era) advanceDone() {
	for {
		a := e.recs[e.done+1]
		if a == nil || a.state != Decided {
			return
		}
		e.done++
		if a.local {
			delete(e.recs, e.done)
		}
	}
}

// Fail records that rank r failed.
func (e *Era) Fail(r int) {
	if r < 0 || r >= e.n || e.failed.has(r) {
		return
	}
	e.failed.set(r)
	e.known.add(r)
	for _, a := range e.recs {
		e.check(a)
	}
}

// Message takes what rank src sent with tag.
func (e *Era) Message(src, tag int, m []byte) {
	if len(m) < 8 || src < 0 || src >= e.n || e.failed.has(src) {
		return
	}
	seq := binary.LittleEndian.Uint64(m)
	if seq < e.gcBelow || seq > e.next+1<<20 {
		return // forgotten (nobody can still need it), or nonsense
	}
	a := e.rec(seq)
	switch tag {
	case TagUp:
		switch a.state {
		case Decided:
			e.sendDown(a, src)
		case NotEntered:
			a.pending = append(a.pending, pendingUp{src, slices.Clone(m)})
		default:
			e.combine(a, src, m)
			if a.state == Broadcasting {
				// Its contribution is counted already (it came through
				// the child that failed between us) or by now; it waits
				// for the decision from here.
				a.requesters.add(src)
			}
			e.check(a)
		}
	case TagDown:
		if a.state == Gathering || a.state == Broadcasting {
			if d, ok := e.decodeDown(m); ok && len(d.val) == len(a.val) {
				e.decide(a, d.val, d.raised, d.dead, d.gc)
			}
		}
	case TagReq:
		switch a.state {
		case Decided:
			e.sendDown(a, src)
		case Broadcasting:
			a.requesters.add(src)
			e.sendUp(a, e.Parent(e.me))
		}
	}
}

// check moves agreement a on as far as what is known allows.
func (e *Era) check(a *Agreement) {
	switch a.state {
	case Gathering:
		e.kids = e.children(e.me, e.kids[:0])
		for _, c := range e.kids {
			if !a.gathered.has(c) {
				if a.restarted && !a.asked.has(c) {
					a.asked.add(c)
					e.sendReq(a, c)
				}
				return
			}
		}
		p := e.Parent(e.me)
		if p == e.me {
			e.note(a)
			e.decide(a, a.val, a.raised, a.dead, a.gc)
			return
		}
		e.sendUp(a, p)
		a.state = Broadcasting
	case Broadcasting:
		p := e.Parent(e.me)
		switch {
		case p == a.upTo:
		case p == e.me:
			// The root failed and this process is the root now: its new
			// children may hold the decision, or owe their contribution.
			a.state = Gathering
			a.restarted = true
			e.check(a)
		default:
			e.sendUp(a, p)
		}
	}
}

// note adds this process's own knowledge to a: the failures it knows,
// and an error if it knows of more than it acknowledged.
func (e *Era) note(a *Agreement) {
	a.dead.union(e.known)
	if len(e.known) > a.ackCount {
		a.raised = true
	}
}

// combine counts src's contribution (an UP) into a, once.
func (e *Era) combine(a *Agreement, src int, m []byte) {
	if a.gathered.has(src) {
		return
	}
	u, ok := e.decodeUp(m, len(a.val))
	if !ok {
		return
	}
	a.gathered.add(src)
	for i, o := range a.ops {
		a.val[i] = o.Combine(a.val[i], u.val[i])
	}
	if u.raised || u.ackCount != a.ackCount || u.ackHash != a.ackHash {
		a.raised = true
	}
	a.dead.union(u.dead)
	a.gc = min(a.gc, u.gc)
}

func (e *Era) decide(a *Agreement, val []uint64, raised bool, dead rankSet, gc uint64) {
	a.state = Decided
	a.val = slices.Clone(val)
	a.raised = raised
	a.dead = slices.Clone(dead)
	a.gc = gc
	a.pending = nil
	// Down to the children, and to every process whose contribution came
	// here and may wait for the decision from here: one that took this
	// process for its parent before this one knew the process between
	// them failed, or asked after it had contributed.
	to := e.children(e.me, e.kids[:0])
	for _, r := range a.gathered {
		if !slices.Contains(to, int(r)) {
			to = append(to, int(r))
		}
	}
	for _, r := range a.requesters {
		if !slices.Contains(to, int(r)) {
			to = append(to, int(r))
		}
	}
	e.kids = to
	for _, r := range to {
		e.sendDown(a, r)
	}
	a.requesters, a.gathered, a.asked = nil, nil, nil
	e.advanceDone()
	// Every process that is not known failed contributed to this
	// decision, and had decided every agreement up to gc: none of them
	// can ask for those any more.
	for s := e.gcBelow; s <= gc; s++ {
		delete(e.recs, s)
	}
	e.gcBelow = max(e.gcBelow, gc+1)
}

// Encoding. UP: seq, flags, ack count, ack hash, gc, the value's words,
// the dead set. DOWN: seq, flags, gc, words, dead set. REQ: seq. The dead
// set is a list of uint32 ranks or a bitmap, whichever is shorter.

const (
	flagRaised = 1 << iota
	flagBitmap
)

type upMsg struct {
	val      []uint64
	raised   bool
	ackCount int
	ackHash  uint64
	gc       uint64
	dead     rankSet
}

type downMsg struct {
	val    []uint64
	raised bool
	gc     uint64
	dead   rankSet
}

func (e *Era) appendDead(b []byte, flags *byte, dead rankSet) []byte {
	if 4*len(dead) <= (e.n+7)/8 {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(dead)))
		for _, r := range dead {
			b = binary.LittleEndian.AppendUint32(b, uint32(r))
		}
		return b
	}
	*flags |= flagBitmap
	b = binary.LittleEndian.AppendUint32(b, uint32(e.n))
	at := len(b)
	b = append(b, make([]byte, (e.n+7)/8)...)
	for _, r := range dead {
		b[at+int(r)/8] |= 1 << (r % 8)
	}
	return b
}

// readDead decodes a dead set, in rank order.
func (e *Era) readDead(b []byte, bitmap bool) (rankSet, bool) {
	if len(b) < 4 {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	var out rankSet
	if bitmap {
		if n != e.n || len(b) != (n+7)/8 {
			return nil, false
		}
		for i, x := range b {
			for x != 0 {
				k := bits.TrailingZeros8(x)
				x &^= 1 << k
				if r := i*8 + k; r < e.n {
					out = append(out, int32(r))
				}
			}
		}
		return out, true
	}
	if len(b) != 4*n {
		return nil, false
	}
	out = make(rankSet, 0, n)
	for i := 0; i < n; i++ {
		r := binary.LittleEndian.Uint32(b[4*i:])
		if r >= uint32(e.n) {
			return nil, false
		}
		out = append(out, int32(r))
	}
	slices.Sort(out)
	return slices.Compact(out), true
}

func (e *Era) sendUp(a *Agreement, p int) {
	a.upTo = p
	e.note(a)
	b := binary.LittleEndian.AppendUint64(e.buf[:0], a.seq)
	b = append(b, 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(a.ackCount))
	b = binary.LittleEndian.AppendUint64(b, a.ackHash)
	e.sendValue(a, p, TagUp, b)
}

// sendValue appends a's gc bound, value and dead set to the message b
// has begun (its flags byte at 8), and sends it.
func (e *Era) sendValue(a *Agreement, dest, tag int, b []byte) {
	flags := byte(0)
	if a.raised {
		flags |= flagRaised
	}
	b = binary.LittleEndian.AppendUint64(b, a.gc)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(a.val)))
	for _, v := range a.val {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = e.appendDead(b, &flags, a.dead)
	b[8] = flags
	e.buf = b
	if err := e.send(dest, tag, b); err != nil && a.err == nil {
		a.err = err
	}
}

func (e *Era) decodeUp(m []byte, nval int) (upMsg, bool) {
	var u upMsg
	if len(m) < 36 {
		return u, false
	}
	flags := m[8]
	u.raised = flags&flagRaised != 0
	u.ackCount = int(binary.LittleEndian.Uint32(m[12:]))
	u.ackHash = binary.LittleEndian.Uint64(m[16:])
	u.gc = binary.LittleEndian.Uint64(m[24:])
	if int(binary.LittleEndian.Uint32(m[32:])) != nval || len(m) < 36+8*nval {
		return u, false
	}
	var ok bool
	u.val, u.dead, ok = e.readValue(m, 36, nval, flags&flagBitmap != 0)
	return u, ok
}

// readValue decodes the nval words of a value at m[at:], and the dead
// set after them.
func (e *Era) readValue(m []byte, at, nval int, bitmap bool) ([]uint64, rankSet, bool) {
	val := make([]uint64, nval)
	for i := range val {
		val[i] = binary.LittleEndian.Uint64(m[at+8*i:])
	}
	dead, ok := e.readDead(m[at+8*nval:], bitmap)
	return val, dead, ok
}

func (e *Era) sendDown(a *Agreement, dest int) {
	if dest == e.me {
		return
	}
	b := binary.LittleEndian.AppendUint64(e.buf[:0], a.seq)
	b = append(b, 0, 0, 0, 0)
	e.sendValue(a, dest, TagDown, b)
}

func (e *Era) decodeDown(m []byte) (downMsg, bool) {
	var d downMsg
	if len(m) < 24 {
		return d, false
	}
	flags := m[8]
	d.raised = flags&flagRaised != 0
	d.gc = binary.LittleEndian.Uint64(m[12:])
	nval := int(binary.LittleEndian.Uint32(m[20:]))
	if nval > (len(m)-24)/8 {
		return d, false
	}
	var ok bool
	d.val, d.dead, ok = e.readValue(m, 24, nval, flags&flagBitmap != 0)
	return d, ok
}

func (e *Era) sendReq(a *Agreement, dest int) {
	b := binary.LittleEndian.AppendUint64(e.buf[:0], a.seq)
	e.buf = b
	if err := e.send(dest, TagReq, b); err != nil && a.err == nil {
		a.err = err
	}
}
