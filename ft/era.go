//go:build linux

package ft

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
	tagUp   = 1 // a subtree's contribution
	tagDown = 2 // the decision
	tagReq  = 3 // a new root's request for contributions (or the decision)
)

// combOp combines agreement values.
type combOp uint8

const (
	opAnd combOp = iota
	opOr
	opMin // of int64 values
	opMax // of int64 values
)

func (o combOp) combine(a, b uint64) uint64 {
	switch o {
	case opAnd:
		return a & b
	case opOr:
		return a | b
	case opMin:
		return uint64(min(int64(a), int64(b)))
	case opMax:
		return uint64(max(int64(a), int64(b)))
	}
	return a
}

// The states of an agreement at one process.
const (
	stNotEntered   = iota // heard of, not contributed to
	stGathering           // waiting for its children's contributions
	stBroadcasting        // contributed to its parent; waiting for the decision
	stDecided
)

// agreement is one agreement (one seq) at one process.
type agreement struct {
	seq   uint64
	state int

	ops      []combOp
	val      []uint64
	failed   bool   // a failure not every contributor had acknowledged
	dead     []bool // by comm rank: failed, as some contributor knew
	ackCount int
	ackHash  uint64
	gc       uint64 // every contributor had decided every agreement up to it

	gathered   []bool // by comm rank: its contribution is in val
	upTo       int    // the parent the contribution went to
	restarted  bool   // became the root after contributing to a parent
	asked      []bool // by comm rank: sent a REQ
	requesters []int  // get the decision directly
	pending    []pendingUp

	err error // the agreement could not go on (a message too large)

	local bool // decided through shared memory (decidedHere)
}

type pendingUp struct {
	src int
	msg []byte
}

// era is one communicator's agreements at this process.
type era struct {
	n, me int
	k     int // the tree's arity
	send  func(dest, tag int, payload []byte) error

	failed  []bool // by comm rank: known failed
	nfailed int

	next    uint64 // the seq of the next agreement this process enters
	recs    map[uint64]*agreement
	gcBelow uint64 // agreements before it are forgotten
	done    uint64 // every agreement up to it is decided here

	buf []byte
}

// arity is the agreement tree's: each process gathers from up to 8
// children, so up to 9 processes it is a star (one hop up, one down), and
// 4096 are 4 levels deep — fewer hops than ERA's default binary tree.
// (On a node, with more ranks than CPUs, the two measured alike: there
// an agreement's time goes to waiting for CPUs, docs/performance.md.)
const arity = 8

func newEra(n, me int, send func(dest, tag int, payload []byte) error) *era {
	return newEraK(n, me, arity, send)
}

func newEraK(n, me, k int, send func(dest, tag int, payload []byte) error) *era {
	return &era{n: n, me: me, k: k, send: send, failed: make([]bool, n), next: 1, recs: map[uint64]*agreement{}, gcBelow: 1}
}

// The tree. Ranks are tree indices: the parent of i is (i-1)/k.

// ancestor is i's nearest ancestor not known failed, or -1.
func (e *era) ancestor(i int) int {
	for i > 0 {
		i = (i - 1) / e.k
		if !e.failed[i] {
			return i
		}
	}
	return -1
}

// root is the lowest rank not known failed (all its ancestors, lower
// ranks, are): the root of the repaired tree.
func (e *era) root() int {
	for i, f := range e.failed {
		if !f {
			return i
		}
	}
	return -1
}

func (e *era) parent(i int) int {
	if a := e.ancestor(i); a >= 0 {
		return a
	}
	return e.root()
}

// children appends i's children in the repaired tree to out: the
// processes whose nearest live ancestor it is, and, for the root, the
// other processes with no live ancestor.
func (e *era) children(i int, out []int) []int {
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
func (e *era) tops(j, skip int, out []int) []int {
	if j >= e.n {
		return out
	}
	if !e.failed[j] {
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
func (e *era) rec(seq uint64) *agreement {
	a := e.recs[seq]
	if a == nil {
		a = &agreement{seq: seq, upTo: -1}
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

// enter starts this process's part in the next agreement: its value,
// the combining operation of each word (the same at every process), and
// the failures it acknowledges (comm ranks).
func (e *era) enter(val []uint64, ops []combOp, acked []int) *agreement {
	return e.enterAt(e.reserve(), val, ops, acked)
}

// reserve takes the next agreement's seq for a contribution made later
// (enterAt): members reserve in one order and may enter in another.
func (e *era) reserve() uint64 {
	seq := e.next
	e.next++
	return seq
}

// enterAt is enter for the reserved agreement seq.
func (e *era) enterAt(seq uint64, val []uint64, ops []combOp, acked []int) *agreement {
	a := e.rec(seq)
	a.state = stGathering
	a.ops = ops
	a.val = slices.Clone(val)
	a.dead = make([]bool, e.n)
	a.gathered = make([]bool, e.n)
	a.asked = make([]bool, e.n)
	a.gathered[e.me] = true
	a.ackCount, a.ackHash = ackKey(acked)
	a.gc = e.done
	for _, p := range a.pending {
		e.combine(a, p.src, p.msg)
	}
	a.pending = nil
	e.check(a)
	return a
}

// decidedHere records the reserved agreement seq as decided by other
// means — through shared memory, at every member alike — so that it
// counts towards done. No message will concern it: it is forgotten once
// done has passed it (at once, when it is the next).
func (e *era) decidedHere(seq uint64) {
	if seq == e.done+1 && e.recs[seq] == nil {
		e.done++
		e.advanceDone()
		return
	}
	a := e.rec(seq)
	a.state, a.local = stDecided, true
	a.pending = nil
	e.advanceDone()
}

// advanceDone moves done past the agreements decided here.
func (e *era) advanceDone() {
	for {
		a := e.recs[e.done+1]
		if a == nil || a.state != stDecided {
			return
		}
		e.done++
		if a.local {
			delete(e.recs, e.done)
		}
	}
}

// fail records that comm rank r failed.
func (e *era) fail(r int) {
	if r < 0 || r >= e.n || e.failed[r] {
		return
	}
	e.failed[r] = true
	e.nfailed++
	for _, a := range e.recs {
		e.check(a)
	}
}

// message takes what comm rank src sent on the channel.
func (e *era) message(src, tag int, m []byte) {
	if len(m) < 8 || src < 0 || src >= e.n || e.failed[src] {
		return
	}
	seq := binary.LittleEndian.Uint64(m)
	if seq < e.gcBelow || seq > e.next+1<<20 {
		return // forgotten (nobody can still need it), or nonsense
	}
	a := e.rec(seq)
	switch tag {
	case tagUp:
		switch a.state {
		case stDecided:
			e.sendDown(a, src)
		case stNotEntered:
			a.pending = append(a.pending, pendingUp{src, slices.Clone(m)})
		default:
			e.combine(a, src, m)
			if a.state == stBroadcasting && !slices.Contains(a.requesters, src) {
				// Its contribution is counted already (it came through
				// the child that failed between us) or by now; it waits
				// for the decision from here.
				a.requesters = append(a.requesters, src)
			}
			e.check(a)
		}
	case tagDown:
		if a.state == stGathering || a.state == stBroadcasting {
			if d, ok := e.decodeDown(m); ok && len(d.val) == len(a.val) {
				e.decide(a, d.val, d.failed, d.dead, d.gc)
			}
		}
	case tagReq:
		switch a.state {
		case stDecided:
			e.sendDown(a, src)
		case stBroadcasting:
			if !slices.Contains(a.requesters, src) {
				a.requesters = append(a.requesters, src)
			}
			e.sendUp(a, e.parent(e.me))
		}
	}
}

// check moves agreement a on as far as what is known allows.
func (e *era) check(a *agreement) {
	switch a.state {
	case stGathering:
		var kids [64]int
		for _, c := range e.children(e.me, kids[:0]) {
			if !a.gathered[c] {
				if a.restarted && !a.asked[c] {
					a.asked[c] = true
					e.sendReq(a, c)
				}
				return
			}
		}
		p := e.parent(e.me)
		if p == e.me {
			e.note(a)
			e.decide(a, a.val, a.failed, a.dead, a.gc)
			return
		}
		e.sendUp(a, p)
		a.state = stBroadcasting
	case stBroadcasting:
		p := e.parent(e.me)
		switch {
		case p == a.upTo:
		case p == e.me:
			// The root failed and this process is the root now: its new
			// children may hold the decision, or owe their contribution.
			a.state = stGathering
			a.restarted = true
			e.check(a)
		default:
			e.sendUp(a, p)
		}
	}
}

// note adds this process's own knowledge to a: the failures it knows,
// and an error if it knows of more than it acknowledged.
func (e *era) note(a *agreement) {
	for r, f := range e.failed {
		if f {
			a.dead[r] = true
		}
	}
	if e.nfailed > a.ackCount {
		a.failed = true
	}
}

// combine counts src's contribution (an UP) into a, once.
func (e *era) combine(a *agreement, src int, m []byte) {
	if a.gathered[src] {
		return
	}
	u, ok := e.decodeUp(m, len(a.val))
	if !ok {
		return
	}
	a.gathered[src] = true
	for i, o := range a.ops {
		a.val[i] = o.combine(a.val[i], u.val[i])
	}
	if u.failed || u.ackCount != a.ackCount || u.ackHash != a.ackHash {
		a.failed = true
	}
	for _, r := range u.dead {
		a.dead[r] = true
	}
	a.gc = min(a.gc, u.gc)
}

func (e *era) decide(a *agreement, val []uint64, failed bool, dead []bool, gc uint64) {
	a.state = stDecided
	a.val = slices.Clone(val)
	a.failed = failed
	a.dead = slices.Clone(dead)
	a.gc = gc
	a.pending = nil
	// Down to the children, and to every process whose contribution came
	// here and may wait for the decision from here: one that took this
	// process for its parent before this one knew the process between
	// them failed, or asked after it had contributed.
	var kids [64]int
	to := e.children(e.me, kids[:0])
	for r, g := range a.gathered {
		if g && !slices.Contains(to, r) {
			to = append(to, r)
		}
	}
	for _, r := range a.requesters {
		if !slices.Contains(to, r) {
			to = append(to, r)
		}
	}
	for _, r := range to {
		e.sendDown(a, r)
	}
	a.requesters = nil
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
	flagFailed = 1 << iota
	flagBitmap
)

type upMsg struct {
	val      []uint64
	failed   bool
	ackCount int
	ackHash  uint64
	gc       uint64
	dead     []int
}

type downMsg struct {
	val    []uint64
	failed bool
	gc     uint64
	dead   []bool
}

func (e *era) appendDead(b []byte, flags *byte, dead []bool) []byte {
	n := 0
	for _, d := range dead {
		if d {
			n++
		}
	}
	if 4*n <= (e.n+7)/8 {
		b = binary.LittleEndian.AppendUint32(b, uint32(n))
		for r, d := range dead {
			if d {
				b = binary.LittleEndian.AppendUint32(b, uint32(r))
			}
		}
		return b
	}
	*flags |= flagBitmap
	b = binary.LittleEndian.AppendUint32(b, uint32(e.n))
	bm := make([]byte, (e.n+7)/8)
	for r, d := range dead {
		if d {
			bm[r/8] |= 1 << (r % 8)
		}
	}
	return append(b, bm...)
}

func (e *era) readDead(b []byte, bitmap bool, each func(r int)) bool {
	if len(b) < 4 {
		return false
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if bitmap {
		if n != e.n || len(b) != (n+7)/8 {
			return false
		}
		for i, x := range b {
			for x != 0 {
				k := bits.TrailingZeros8(x)
				x &^= 1 << k
				if r := i*8 + k; r < e.n {
					each(r)
				}
			}
		}
		return true
	}
	if len(b) != 4*n {
		return false
	}
	for i := 0; i < n; i++ {
		r := int(binary.LittleEndian.Uint32(b[4*i:]))
		if r >= e.n {
			return false
		}
		each(r)
	}
	return true
}

func (e *era) sendUp(a *agreement, p int) {
	a.upTo = p
	e.note(a)
	b := binary.LittleEndian.AppendUint64(e.buf[:0], a.seq)
	b = append(b, 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(a.ackCount))
	b = binary.LittleEndian.AppendUint64(b, a.ackHash)
	e.sendValue(a, p, tagUp, b)
}

// sendValue appends a's gc bound, value and dead set to the message b
// has begun (its flags byte at 8), and sends it.
func (e *era) sendValue(a *agreement, dest, tag int, b []byte) {
	flags := byte(0)
	if a.failed {
		flags |= flagFailed
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

func (e *era) decodeUp(m []byte, nval int) (upMsg, bool) {
	var u upMsg
	if len(m) < 36 {
		return u, false
	}
	flags := m[8]
	u.failed = flags&flagFailed != 0
	u.ackCount = int(binary.LittleEndian.Uint32(m[12:]))
	u.ackHash = binary.LittleEndian.Uint64(m[16:])
	u.gc = binary.LittleEndian.Uint64(m[24:])
	if int(binary.LittleEndian.Uint32(m[32:])) != nval || len(m) < 36+8*nval {
		return u, false
	}
	u.val = make([]uint64, nval)
	for i := range u.val {
		u.val[i] = binary.LittleEndian.Uint64(m[36+8*i:])
	}
	ok := e.readDead(m[36+8*nval:], flags&flagBitmap != 0, func(r int) { u.dead = append(u.dead, r) })
	return u, ok
}

func (e *era) sendDown(a *agreement, dest int) {
	if dest == e.me {
		return
	}
	b := binary.LittleEndian.AppendUint64(e.buf[:0], a.seq)
	b = append(b, 0, 0, 0, 0)
	e.sendValue(a, dest, tagDown, b)
}

func (e *era) decodeDown(m []byte) (downMsg, bool) {
	var d downMsg
	if len(m) < 24 {
		return d, false
	}
	flags := m[8]
	d.failed = flags&flagFailed != 0
	d.gc = binary.LittleEndian.Uint64(m[12:])
	nval := int(binary.LittleEndian.Uint32(m[20:]))
	if nval > (len(m)-24)/8 {
		return d, false
	}
	d.val = make([]uint64, nval)
	for i := range d.val {
		d.val[i] = binary.LittleEndian.Uint64(m[24+8*i:])
	}
	d.dead = make([]bool, e.n)
	ok := e.readDead(m[24+8*nval:], flags&flagBitmap != 0, func(r int) { d.dead[r] = true })
	return d, ok
}

func (e *era) sendReq(a *agreement, dest int) {
	b := binary.LittleEndian.AppendUint64(e.buf[:0], a.seq)
	e.buf = b
	if err := e.send(dest, tagReq, b); err != nil && a.err == nil {
		a.err = err
	}
}
