//go:build linux

package rdma

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// The credit protocol (credits.go) run in a model of the fabric: every
// process is a credits value whose io moves words and frames through
// channels that keep each queue pair's order, as RC does, and nothing
// else — a seeded scheduler delivers one operation of any channel, or
// runs one process's poll, at random, and also delivers in the middle of
// a process's reads of its control words. The model checks what the
// protocol promises: a frame always finds a posted buffer (no RNR NAK) and
// its peer's completion queue room for it; a buffer is never posted twice;
// every frame is delivered, in order; and the protocol never stops with
// frames still to send.

// simOp is an operation in flight on a queue pair: a frame, a write of a
// control word, or a ring of the doorbell.
type simOp struct {
	kind   int // simFrame, simWrite, simRing
	word   int // simWrite: the word's index
	val    uint64
	seq    uint32 // simFrame: its number among its sender's frames to this peer
	credit uint32 // simFrame: the sender's granted count for our frames, in its header
}

const (
	simFrame = iota
	simWrite
	simRing
)

type simLanded struct {
	buf         int
	seq, credit uint32
}

// simNode is one process of the model.
type simNode struct {
	net     *simNet
	rank    int
	c       credits
	links   []*link // by rank; nil for itself
	ctl     []uint64
	doorb   uint64
	srq     []int
	posted  [vPool]bool
	rcq     [][]simLanded // by sender: frames landed, not yet polled
	toSend  []int         // by rank: frames still to send it
	sendSeq []uint32      // by rank: frames sent it
	recvSeq []uint32      // by rank: frames delivered from it
	until   int           // the first step it polls at: it is descheduled till then
	next    int           // the peer the next poll drains first
}

type simNet struct {
	rng   *rand.Rand
	nodes []*simNode
	chans [][][]simOp // [from][to]: operations in flight, in order
	live  []int       // the channels with operations in flight: from×size+to
	where []int       // by channel: its index in live, while it has operations in flight
	// full makes a post of a control write fail, as a full send queue
	// does, this often (a fraction); checking turns the faults and the
	// deliveries inside reads off.
	full     float64
	checking bool
	moved    int // operations posted and delivered, frames sent and polled
	left     int // frames not yet delivered
	fault    string
}

func (n *simNode) word(w, k int) uint64 {
	n.net.interleave()
	return n.ctl[w*vCtlWords+k]
}

func (n *simNode) bell() uint64 {
	n.net.interleave()
	return n.doorb
}

var errSimFull = errors.New("send queue full (model)")

func (n *simNode) writeCtl(p *link, k int, val uint64) error {
	if n.net.postFails() {
		return errSimFull
	}
	n.net.push(n.rank, p.world, simOp{kind: simWrite, word: n.rank*vCtlWords + k, val: val})
	return nil
}

func (n *simNode) ring(p *link, k int, val uint64) error {
	if n.net.postFails() {
		return errSimFull
	}
	n.net.push(n.rank, p.world, simOp{kind: simWrite, word: n.rank*vCtlWords + k, val: val})
	n.net.push(n.rank, p.world, simOp{kind: simRing})
	return nil
}

func (n *simNode) post(bufs []int) error {
	for _, k := range bufs {
		if n.posted[k] {
			n.net.failf("rank %d posted buffer %d twice", n.rank, k)
			continue
		}
		n.posted[k] = true
		n.srq = append(n.srq, k)
	}
	return nil
}

func (n *simNode) Closed(int) bool { return false }

func (n *simNode) DeviceFatal(err error) { n.net.failf("rank %d: device fatal: %v", n.rank, err) }

func (s *simNet) failf(format string, args ...any) {
	if s.fault == "" {
		s.fault = fmt.Sprintf(format, args...)
	}
}

func (s *simNet) postFails() bool { return !s.checking && s.rng.Float64() < s.full }

func (s *simNet) push(from, to int, op simOp) {
	if len(s.chans[from][to]) == 0 {
		ch := from*len(s.nodes) + to
		s.where[ch] = len(s.live)
		s.live = append(s.live, ch)
	}
	s.chans[from][to] = append(s.chans[from][to], op)
	s.moved++
}

// interleave delivers what may land while a process reads its words.
func (s *simNet) interleave() {
	for !s.checking && s.rng.Intn(4) == 0 {
		if !s.deliverAny() {
			return
		}
	}
}

// deliverAny delivers the next operation of a channel chosen at random.
func (s *simNet) deliverAny() bool {
	if len(s.live) == 0 {
		return false
	}
	ch := s.live[s.rng.Intn(len(s.live))]
	s.deliver(ch/len(s.nodes), ch%len(s.nodes))
	return true
}

// deliver lands the next operation from rank from at rank to.
func (s *simNet) deliver(from, to int) {
	op := s.chans[from][to][0]
	s.chans[from][to] = s.chans[from][to][1:]
	s.moved++
	if len(s.chans[from][to]) == 0 {
		ch := from*len(s.nodes) + to
		i, last := s.where[ch], s.live[len(s.live)-1]
		s.live[i], s.where[last] = last, i
		s.live = s.live[:len(s.live)-1]
	}
	dst := s.nodes[to]
	switch op.kind {
	case simWrite:
		dst.ctl[op.word] = op.val
	case simRing:
		dst.doorb++
	case simFrame:
		if len(dst.srq) == 0 {
			s.failf("frame %d from rank %d found rank %d's pool empty (an RNR NAK)", op.seq, from, to)
			return
		}
		k := dst.srq[0]
		dst.srq = dst.srq[1:]
		dst.posted[k] = false
		if len(dst.rcq[from]) == vWindow {
			s.failf("frame %d from rank %d overran rank %d's completion queue for it", op.seq, from, to)
			return
		}
		dst.rcq[from] = append(dst.rcq[from], simLanded{k, op.seq, op.credit})
	}
}

// poll is Provider.Poll's part in the protocol, and the sends an engine
// makes after it.
func (n *simNode) poll(budget int) {
	c := &n.c
	c.doorbell()
	c.repostDue()
	got := 0
	for i := range len(c.byIx) {
		if got >= budget {
			break
		}
		p := c.byIx[(n.next+i)%len(c.byIx)]
		q := n.rcq[p.world]
		for k := 0; k < min(8, budget-got) && len(q) > 0; k++ {
			f := q[0]
			q = q[1:]
			p.heard(f.credit)
			if f.seq != n.recvSeq[p.world] {
				n.net.failf("rank %d got frame %d from rank %d, want %d", n.rank, f.seq, p.world, n.recvSeq[p.world])
			}
			n.recvSeq[p.world]++
			n.net.left--
			n.net.moved++
			c.take(p, f.buf)
			got++
		}
		n.rcq[p.world] = q
	}
	n.next++
	for w, left := range n.toSend {
		p := n.links[w]
		for ; left > 0 && c.canSend(p); left-- {
			n.net.push(n.rank, w, simOp{kind: simFrame, seq: n.sendSeq[w], credit: p.granted})
			n.sendSeq[w]++
			p.sent++
			p.told = p.granted
		}
		n.toSend[w] = left
	}
}

// newSimNet makes a model of size processes, every pair connected, in
// which rank i sends rank j sends[i][j] frames.
func newSimNet(seed int64, size int, sends func(i, j int) int) *simNet {
	s := &simNet{rng: rand.New(rand.NewSource(seed)), chans: make([][][]simOp, size), where: make([]int, size*size)}
	for i := range size {
		s.chans[i] = make([][]simOp, size)
		n := &simNode{net: s, rank: i, links: make([]*link, size), ctl: make([]uint64, size*vCtlWords),
			rcq: make([][]simLanded, size), toSend: make([]int, size), sendSeq: make([]uint32, size), recvSeq: make([]uint32, size)}
		n.c.io = n
		n.c.initial = min(max(vPool/max(1, size-1), vInitial), vWindow)
		n.c.toPost = make([]int, 0, vPool)
		all := make([]int, vPool)
		for k := range all {
			all[k] = k
		}
		n.post(all)
		for j := range size {
			if j != i {
				n.toSend[j] = sends(i, j)
				s.left += n.toSend[j]
			}
		}
		s.nodes = append(s.nodes, n)
	}
	// Connect every pair, in an order of its own for each process (as
	// first uses come): each grants the other its initial window, which
	// the handshake tells.
	for _, n := range s.nodes {
		for _, j := range s.rng.Perm(size) {
			if j == n.rank {
				continue
			}
			p := &link{world: j, connected: true, ready: true, window: n.c.initial}
			n.c.grant(p)
			p.told = p.granted
			n.links[j] = p
			n.c.byIx = append(n.c.byIx, p)
		}
	}
	for _, n := range s.nodes {
		for j, p := range n.links {
			if p != nil {
				p.credit(s.nodes[j].links[n.rank].granted)
			}
		}
	}
	return s
}

// run schedules the model at random until every frame is delivered, a
// promise is broken, or it stops with frames still to go (checked, when
// every channel is empty, by polling each process with no faults).
func (s *simNet) run(wake int) {
	s.nodes[0].until = wake
	for step := 0; s.left > 0 && s.fault == ""; step++ {
		if s.rng.Intn(2) == 0 && s.deliverAny() {
			continue
		}
		if n := s.nodes[s.rng.Intn(len(s.nodes))]; step >= n.until {
			n.poll(1 + s.rng.Intn(32))
			// Now and then a process is descheduled for a while, as on
			// a loaded machine.
			if s.rng.Intn(256) == 0 {
				n.until = step + s.rng.Intn(4096)
			}
		}
		if s.left == 0 || step < wake || step%64 != 0 || s.busy() {
			continue
		}
		// Nothing in flight: does anything move still?
		s.checking = true
		before := s.moved
		for range 3 {
			for _, n := range s.nodes {
				n.poll(vPool)
			}
			for s.deliverAny() {
			}
		}
		s.checking = false
		if s.moved == before {
			s.failf("stopped with %d frames to go\n%s", s.left, s.state())
		}
	}
}

func (s *simNet) busy() bool { return len(s.live) > 0 }

// state says where each process's credits stand.
func (s *simNet) state() string {
	var b strings.Builder
	for _, n := range s.nodes {
		fmt.Fprintf(&b, "rank %d: committed %d, toPost %d, starving %d, posted %d\n",
			n.rank, n.c.committed, len(n.c.toPost), len(n.c.starving), len(n.srq))
		for j, p := range n.links {
			if p == nil || (n.toSend[j] == 0 && p.granted == p.taken+p.burnSeen && p.limit == p.sent) {
				continue
			}
			fmt.Fprintf(&b, "  to %d: to send %d, sent %d, limit %d, asked %v at %d, burned %d; "+
				"from %d: granted %d, told %d, taken %d, burnSeen %d, window %d, starving %v, revoked %v, landed %d\n",
				j, n.toSend[j], p.sent, p.limit, p.asked, p.askedAt, p.burned,
				j, p.granted, p.told, p.taken, p.burnSeen, p.window, p.starving, p.revoked, len(n.rcq[j]))
		}
	}
	return b.String()
}

// toRank0 is a pattern of n frames from every rank to rank 0.
func toRank0(n int) func(i, j int) int {
	return func(i, j int) int {
		if j == 0 {
			return n
		}
		return 0
	}
}

var simSeeds = flag.Int("credits.seeds", 40, "schedules TestCreditsModel runs of each pattern")

// TestCreditsModel runs the credit protocol in the model, in the
// patterns the fabric's tests make on soft-RoCE (TestVerbsFlood,
// TestVerbsCrowd) and beyond, many schedules each.
func TestCreditsModel(t *testing.T) {
	for _, c := range []struct {
		name  string
		size  int
		sends func(i, j int) int
		wake  int // steps before rank 0 first polls
	}{
		// Everyone to rank 0, which sleeps first: 3 senders, whose
		// windows fit the pool, and 8, whose do not.
		{"flood", 4, toRank0(3000), 2000},
		{"crowd", 9, toRank0(600), 2000},
		{"all-to-all", 6, func(i, j int) int { return 300 }, 0},
		// Rank 0 and 69 others both ways: windows of 4.
		{"wide", 70, func(i, j int) int {
			if i == 0 || j == 0 {
				return 40
			}
			return 0
		}, 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := range int64(*simSeeds) {
				s := newSimNet(seed, c.size, c.sends)
				s.full = 0.02
				s.run(c.wake)
				if s.fault != "" {
					t.Fatalf("seed %d: %s", seed, s.fault)
				}
			}
		})
	}
}
