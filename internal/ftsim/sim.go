package ftsim

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// Time is simulated time since the run began.
type Time = time.Duration

const never = Time(math.MaxInt64)

// epoch is the wall-clock time simulated time 0 is, for ulfm.Silence
// (which takes time.Time): any fixed, non-zero instant.
var epoch = time.Unix(1<<30, 0)

// Tags of the messages the simulation carries beside ERA's (ulfm.TagUp,
// TagDown, TagReq).
const (
	tagNotice = 10 + iota // a failure notice: the failed rank
	tagRevoke             // a revoke notice
	tagFence              // a verdict carried out: the fence word written
	tagColl               // a reference collective's message: its round
)

type evKind uint8

const (
	evMsg       evKind = iota // a message arrives
	evLook                    // an observer looks at the heartbeat it watches
	evEnter                   // a process enters the agreement
	evFault                   // a process's fault begins: its observer looks closely
	evRevoke                  // a process revokes
	evColl                    // a process starts a reference collective
	evShrink                  // a process starts a shrink
	evCut                     // a partition begins
	evNodeEnter               // a process enters a node agreement
	evNodePoll                // a process polls its node agreement
	evPidfd                   // a process's pidfd of a killed peer fires
	evRefused                 // a process's handshake with a dead peer is refused
	evAnswer                  // a process's question to a node ends (connect.go)
)

type event struct {
	at   Time
	seq  uint64
	kind evKind
	to   int32
	src  int32
	tag  int32
	gen  uint32 // a look's: the observer's watch it belongs to
	data []byte
}

// queue is a min-heap of events by (at, seq): ties go in the order the
// events were made, so a run depends on nothing but its seed.
type queue []event

func (q queue) less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}

func (q *queue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *queue) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = event{}
	h = h[:n]
	for i := 0; ; {
		l, s := 2*i+1, i
		if l < n && h.less(l, s) {
			s = l
		}
		if r := l + 1; r < n && h.less(r, s) {
			s = r
		}
		if s == i {
			break
		}
		h[i], h[s] = h[s], h[i]
		i = s
	}
	*q = h
	return top
}

// proc is one simulated process.
type proc struct {
	rank int

	// Its fault. A dead process (from dieAt) does nothing more, and
	// reads of its heartbeat from other nodes go unanswered. A slow one
	// is alive but not run from slowFrom to slowTo, its heartbeat thread
	// neither.
	dieAt            Time
	slowFrom, slowTo Time
	killTag          int // dies at its killAfter+1-th send with this tag (0: no such trigger)
	killAfter        int

	cpu, nic, clock Time // its CPU is busy until cpu; its NIC until nic; now, in a handler

	known   rankSet      // failures it learned, in rank order
	notices ulfm.Notices // the failure notices' broadcast
	revoke  ulfm.Notices // the revoke's

	era       *ulfm.Era
	agr       *ulfm.Agreement
	entered   bool
	decidedAt Time
	revokedAt Time

	// Its part in the detector: the process it observes, the measure,
	// and whether it is looking closely (its observed process is not
	// known healthy); gen tells a look of this watch from older ones.
	obs     int
	sil     *ulfm.Silence
	looking bool
	gen     uint32
	phase   Time
	connAt  Time         // when its connection to obs can be read (connect.go)
	asking  map[int]bool // the nodes it asks whether they are there
	asked   bool         // this watch asked its node (once a watch)

	coll   collState
	shrink *shrinkState
	node   *nodeState
}

// rankSet is a small set of ranks, sorted.
type rankSet []int32

func (s rankSet) has(r int) bool {
	_, ok := slices.BinarySearch(s, int32(r))
	return ok
}

func (s rankSet) ints() []int {
	out := make([]int, len(s))
	for i, r := range s {
		out[i] = int(r)
	}
	return out
}

func (s *rankSet) add(r int) bool {
	i, ok := slices.BinarySearch(*s, int32(r))
	if !ok {
		*s = slices.Insert(*s, i, int32(r))
	}
	return !ok
}

// Sim is one simulated job.
type Sim struct {
	m     Model
	seed  uint64
	rng   *rand.Rand
	n     int
	procs []*proc
	ranks []int // 0 to n-1, the detector's ring order
	q     queue
	seq   uint64
	now   Time
	fifo  map[uint64]Time // (src, dst) → the last arrival between them

	msgs [tagColl + 1]int // messages sent, by protocol

	// learned[r]: how many processes learned that r failed, and when the
	// last did.
	learned   map[int]int
	learnedAt map[int]Time

	cuts          []partition
	nodeOf        []int    // by rank, its node: the quorum rule is on (a job across nodes, with partitions)
	downAt        []Time   // by node, when it went down (never: it did not)
	convictedLive [][2]int // (by whom, whom): a process declared failed while it lived

	vals    []uint64  // by rank: its contribution
	words   nodeWords // a node agreement's state words, by rank
	slots   []uint64  // and its published words
	coll    int       // the reference collective played, if any
	busy    int       // a shrink's ids: Scenario.Busy
	noProbe bool      // Scenario.NoNodeProbe

	violations []string
	limit      Time // simulated time after which the run is a hang
}

func newSim(m Model, n int, seed uint64) *Sim {
	s := &Sim{m: m, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), n: n, fifo: map[uint64]Time{},
		learned: map[int]int{}, learnedAt: map[int]Time{}, limit: time.Hour}
	s.ranks = make([]int, n)
	for i := range s.ranks {
		s.ranks[i] = i
	}
	s.downAt = make([]Time, (n+m.PPN-1)/m.PPN)
	for i := range s.downAt {
		s.downAt[i] = never
	}
	s.procs = make([]*proc, n)
	for i := range s.procs {
		p := &proc{rank: i, dieAt: never, slowFrom: never, slowTo: never, decidedAt: -1, revokedAt: -1, obs: -1}
		p.phase = Time(s.rng.Int64N(int64(m.Detector.Tick)))
		s.procs[i] = p
	}
	return s
}

// violate records a broken promise.
func (s *Sim) violate(format string, args ...any) {
	if len(s.violations) < 20 {
		s.violations = append(s.violations, fmt.Sprintf("at %v: ", s.now)+fmt.Sprintf(format, args...))
	}
}

func (s *Sim) push(e event) {
	s.seq++
	e.seq = s.seq
	s.q.push(e)
}

// run plays events until none is left, or the limit.
func (s *Sim) run() {
	for len(s.q) > 0 {
		e := s.q.pop()
		if e.at > s.limit {
			s.violate("still running after %v of simulated time: a protocol does not end", s.limit)
			return
		}
		s.now = e.at
		s.handle(e)
	}
}

func (s *Sim) handle(e event) {
	p := s.procs[e.to]
	switch e.kind {
	case evFault:
		s.fault(p)
		return
	case evLook:
		s.look(p, e)
		return
	case evCut:
		s.cut()
		return
	}
	if !s.begin(p, e.at) {
		return
	}
	switch e.kind {
	case evMsg:
		p.clock += s.m.O
		s.deliver(p, int(e.src), int(e.tag), e.data)
	case evEnter:
		s.enter(p)
	case evRevoke:
		s.revoke(p)
	case evColl:
		s.collStart(p)
	case evShrink:
		s.startShrink(p)
	case evNodeEnter:
		s.nodeEnter(p)
	case evNodePoll:
		s.nodePoll(p)
	case evPidfd, evRefused:
		s.learn(p, int(e.src))
	case evAnswer:
		s.nodeAnswer(p, int(e.src), e.data)
	}
	s.end(p)
}

// begin starts a handler of p for an event at at: p runs once its CPU is
// free, after any time it is not run; it reports false if p is dead by
// then.
func (s *Sim) begin(p *proc, at Time) bool {
	t := max(at, p.cpu)
	if t >= p.slowFrom && t < p.slowTo {
		t = p.slowTo
	}
	if s.m.Stall > 0 && s.rng.Float64() < s.m.Stall {
		t += Time(s.rng.Int64N(int64(s.m.StallMax) + 1))
	}
	if t >= p.dieAt {
		return false
	}
	p.clock = t
	return true
}

// end finishes a handler of p.
func (s *Sim) end(p *proc) {
	p.cpu = p.clock
	s.afterAgreement(p)
}

// send sends payload from p to dest, at p's clock.
func (s *Sim) send(p *proc, dest, tag int, payload []byte) {
	if p.killTag == tag {
		if p.killAfter == 0 {
			s.die(p, p.clock)
		}
		p.killAfter--
	}
	if p.clock >= p.dieAt {
		return
	}
	start := max(p.clock, p.nic)
	p.clock = start + s.m.O
	bytes := s.m.Header + len(payload)
	lat, per := s.m.LNet, s.m.ByteNet
	if s.m.node(p.rank) == s.m.node(dest) {
		lat, per = s.m.LNode, s.m.ByteNode
	}
	wire := Time(bytes) * per
	p.nic = start + max(s.m.G, wire)
	if s.m.Jitter > 0 {
		lat += Time(s.rng.Float64() * s.m.Jitter * float64(lat))
	}
	at := start + s.m.O + lat + wire
	if cut, c := s.cutAt(p.rank, dest, start); cut {
		if c.until-start > rcRetry {
			return // given up
		}
		at = max(at, c.until+lat)
	}
	k := uint64(p.rank)<<32 | uint64(dest)
	if last := s.fifo[k]; at < last {
		at = last
	}
	s.fifo[k] = at
	kind := tag
	if tag < tagNotice {
		kind = 0 // ERA's
	}
	s.msgs[kind]++
	s.push(event{at: at, kind: evMsg, to: int32(dest), src: int32(p.rank), tag: int32(tag), data: slices.Clone(payload)})
}

// die makes p dead from t.
func (s *Sim) die(p *proc, t Time) {
	if t >= p.dieAt {
		return
	}
	p.dieAt = t
	s.push(event{at: max(t, s.now), kind: evFault, to: int32(p.rank)})
}

func (s *Sim) deliver(p *proc, src, tag int, m []byte) {
	switch tag {
	case ulfm.TagUp, ulfm.TagDown, ulfm.TagReq:
		if p.era != nil {
			p.era.Message(src, tag, m)
		}
	case tagNotice:
		s.learn(p, int(binary.LittleEndian.Uint32(m)))
	case tagRevoke:
		s.revoke(p)
	case tagFence:
		// Declared failed, this process ends itself (its heartbeat
		// thread sees the fence word).
		s.die(p, p.clock)
	case tagColl:
		s.collMessage(p, src, m)
	}
}

// knows reports whether p knows r failed.
func (p *proc) knows(r int) bool { return p.known.has(r) }

// learn is what p does when it learns that r failed, from any source: it
// tells its neighbours in the notices' graph (once), its agreements, and
// its detector, as the fabric does.
func (s *Sim) learn(p *proc, r int) {
	if r == p.rank || !p.known.add(r) {
		return
	}
	s.learned[r]++
	s.learnedAt[r] = max(s.learnedAt[r], p.clock)
	if s.procs[r].dieAt > p.clock {
		if len(s.cuts) == 0 {
			s.violate("rank %d learned that rank %d failed, which is alive", p.rank, r)
		}
		// Across a partition, a live process is convicted: the verdict
		// must come true, or the side that made it end (check). Carried
		// out, it writes the process's fence word, which ends it if the
		// write gets through.
		s.convictedLive = append(s.convictedLive, [2]int{p.rank, r})
		s.send(p, r, tagFence, nil)
	}
	p.notices.Spread(p.rank, s.n, r, p.knows, func(t, v int) {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(v))
		s.send(p, t, tagNotice, b[:])
	})
	if p.revokedAt >= 0 {
		p.revoke.Recheck(p.rank, s.n, p.knows, func(t, _ int) { s.send(p, t, tagRevoke, nil) })
	}
	if p.era != nil {
		p.era.Fail(r)
	}
	if p.obs == r {
		s.watch(p, s.nextObserved(p))
	}
	if s.nodeOf != nil {
		s.quorumLost(p)
	}
}

// revoke revokes the communicator at p (once) and tells its neighbours.
func (s *Sim) revoke(p *proc) {
	if p.revokedAt >= 0 {
		return
	}
	p.revokedAt = p.clock
	p.revoke.Spread(p.rank, s.n, 0, p.knows, func(t, _ int) { s.send(p, t, tagRevoke, nil) })
}
