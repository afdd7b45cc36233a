//go:build linux

package ft

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// Detector defaults, for fabric.DefaultHeartbeat's period: a stopped
// process is convicted 10 periods after its heartbeat last moved, and one
// whose state this node cannot see (on another node) whose memory still
// answers, 10 timeouts after.
const (
	DefaultTimeout     = 10 * fabric.DefaultHeartbeat
	DefaultUnconfirmed = 10 * DefaultTimeout
	DefaultGrace       = 30 * time.Second
)

// Options tune a Detector. Zero values take the defaults.
type Options struct {
	// Timeout is how long an observed heartbeat may stand still before
	// the process is convicted (default 10 heartbeat periods). It must be
	// well above the period: the beat's thread is woken by the kernel,
	// and a loaded machine wakes it late.
	Timeout time.Duration
	// Tick is how often the observer looks (default a quarter period).
	// The silence is measured from the read that first showed the last
	// beat — at most a tick after the beat; over verbs, a read started at
	// the tick before — and the conviction comes when it reaches
	// Timeout, between ticks if need be.
	Tick time.Duration
	// Grace is how long Start waits for the first heartbeat of the
	// process it observes (default DefaultGrace; over verbs the first
	// read needs a connection).
	Grace time.Duration
	// StalledAfter is how long a heartbeat may stand still before the
	// process is reported stalled (fabric.Stalled; default a quarter of
	// Timeout).
	StalledAfter time.Duration
	// Unconfirmed is how long the heartbeat of a process whose state
	// this node's kernel cannot tell (one on another node) may stand
	// still while reads of it are still answered before it is convicted
	// (default 10 × Timeout). A heartbeat that stood still for Timeout
	// convicts only on evidence that the process cannot run: on its node
	// the kernel says it is stopped, frozen or gone; across nodes, its
	// memory no longer answers. A process on another node that answers
	// but does not beat is stopped or starved, which no observer there
	// can tell apart: it is convicted after Unconfirmed.
	Unconfirmed time.Duration
}

// Detector is this process's part of the job's failure detector: it
// observes one other process at a time — its nearest predecessor in world
// rank order that is not known failed or stopped — and convicts it when
// its heartbeat stops.
type Detector struct {
	ep   *fabric.Endpoint
	me   int // this process's world rank
	o    Options
	stop chan struct{}
	done chan struct{}

	mu        sync.Mutex
	observing int
}

// Start starts this process's detector. It is collective: every process
// of the job calls it (each watches another), and it returns once every
// process has read the heartbeat of the one it watches — over verbs that
// needs a connection, whose handshake needs the other process's
// goroutines, which a busy process may starve later. The endpoint must
// have a heartbeat (fabric.WithHeartbeat, on by default). A process that
// fails before or during Start does not make it fail: the failure is
// recorded and the operations involving that process report it.
func Start(ctx context.Context, ep *fabric.Endpoint, o Options) (*Detector, error) {
	period := ep.HeartbeatPeriod()
	if period == 0 {
		return nil, fmt.Errorf("ft: the endpoint has no heartbeat (fabric.WithHeartbeat): %w", fabric.ErrNotSupported)
	}
	if ep.Sources()&fabric.SourceHeartbeat == 0 {
		return nil, fmt.Errorf("ft: the heartbeat source is switched off (fabric.WithFailureSources): %w", fabric.ErrNotSupported)
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * period
	}
	if o.Tick == 0 {
		o.Tick = period / 4
	}
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.StalledAfter == 0 {
		o.StalledAfter = o.Timeout / 4
	}
	if o.Unconfirmed == 0 {
		o.Unconfirmed = 10 * o.Timeout
	}
	if o.Timeout < 2*period || o.Tick <= 0 || o.Tick > o.Timeout/2 || o.Grace < 0 || o.StalledAfter > o.Timeout ||
		o.Unconfirmed < o.Timeout {
		return nil, fmt.Errorf("ft: detector timeout %v, tick %v, grace %v, stalled after %v, unconfirmed %v with a %v heartbeat: %w",
			o.Timeout, o.Tick, o.Grace, o.StalledAfter, o.Unconfirmed, period, fabric.ErrInvalid)
	}
	me := ep.World().Group().Members()[ep.World().Rank()]
	d := &Detector{ep: ep, o: o, stop: make(chan struct{}), done: make(chan struct{}), observing: -1, me: me}
	obs := d.next(me)
	gctx, cancel := context.WithTimeout(ctx, o.Grace)
	defer cancel()
	for obs >= 0 {
		b, err := ep.Heartbeat(obs)
		switch s := ep.State(obs); {
		case err != nil && (s == fabric.Failed || s == fabric.Stopped):
			// It failed (or closed) before its first beat was read:
			// that is knowledge, not an error of Start. Watch the next.
			obs = d.next(obs)
			continue
		case err != nil && !errors.Is(err, fabric.ErrNoRoute):
			return nil, fmt.Errorf("ft: reading world rank %d's heartbeat: %w", obs, err)
		}
		if err == nil && b.Seen() {
			break
		}
		select {
		case <-gctx.Done():
			return nil, fmt.Errorf("ft: no heartbeat of world rank %d: %w", obs, gctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	// A process may fail while the others start, even right after its
	// own Start returned; the barrier then raises at some of them. The
	// failure is recorded (and the detector's ring passes over it), so
	// Start succeeds: as in MPI, a failure is reported by the operations
	// that involve the process, never by the setup that preceded it.
	if err := collectives.Barrier(ctx, ep.World()); err != nil && !errors.Is(err, fabric.ErrProcFailed) {
		return nil, fmt.Errorf("ft: starting the detector: %w", err)
	}
	go d.run(obs)
	return d, nil
}

// Stop stops the detector (before the endpoint closes).
func (d *Detector) Stop() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.done
}

// Observing is the world rank this process observes now, -1 if none.
func (d *Detector) Observing() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.observing
}

// next is the nearest predecessor of world rank from (not from itself)
// among the processes this one reaches (its job's, and those a spawn
// joined) that is not known failed or stopped, or -1 when there is none
// but this process.
func (d *Detector) next(from int) int {
	ep := d.ep
	return ulfm.Predecessor(ep.Joined(), from, d.me, func(w int) bool {
		s := ep.State(w)
		return s == fabric.Alive || s == fabric.Stalled
	})
}

func (d *Detector) setObserving(w int) {
	d.mu.Lock()
	d.observing = w
	d.mu.Unlock()
}

func (d *Detector) run(obs int) {
	defer close(d.done)
	ep := d.ep
	me := d.me
	t := time.NewTicker(d.o.Tick)
	defer t.Stop()
	// deadline fires when the silence reaches Timeout between two ticks.
	deadline := time.NewTimer(time.Hour)
	deadline.Stop()
	defer deadline.Stop()
	now := time.Now()
	d.setObserving(obs)
	s := ulfm.NewSilence(ulfm.Times{Timeout: d.o.Timeout, Tick: d.o.Tick, StalledAfter: d.o.StalledAfter, Unconfirmed: d.o.Unconfirmed}, now)
	// probe asks this node's kernel about the observed process's
	// heartbeat thread, only once its heartbeat stood still for Timeout.
	probe := func() ulfm.Runstate { return runstate(ep.HeartbeatRunstate(obs)) }
	// nodes ask the nodes of processes convicted for unanswered reads
	// whether they are there.
	var nodes []*nodeQuestion
	asked := -1 // the watched process whose node this watch asked
	defer func() {
		for _, q := range nodes {
			q.stop()
		}
	}()
	for {
		select {
		case <-d.stop:
			return
		case now = <-t.C:
		case now = <-deadline.C:
		}
		deadline.Stop()
		nodes = slices.DeleteFunc(nodes, func(q *nodeQuestion) bool { return q.look(now) })
		if w := d.next(me); w != obs && (obs < 0 || ep.State(obs) == fabric.Alive || ep.State(obs) == fabric.Stalled) {
			// The ring changed under this process — a spawn joined
			// processes between it and the one it watched: watch its
			// new predecessor, afresh. (One known failed or stopped is
			// left below, with its stall cleared.)
			if obs >= 0 {
				ep.SetStalled(obs, false)
			}
			obs = w
			d.setObserving(obs)
			s.Restart(now)
		}
		if obs < 0 {
			s.Restart(now)
			continue
		}
		b, err := ep.Heartbeat(obs)
		if errors.Is(err, fabric.ErrClosed) && ep.State(obs) != fabric.Stopped {
			return // this process's own endpoint closed
		}
		if err != nil {
			// Known failed (by this detector, another, or any other
			// source) or stopped: watch the next one. A process with no
			// heartbeat this one can read is passed over too.
			ep.SetStalled(obs, false)
			obs = d.next(obs)
			d.setObserving(obs)
			s.Restart(now)
			continue
		}
		v, left := s.Look(now, ulfm.Reading{Count: b.Count, At: b.At}, probe)
		switch v {
		case ulfm.Beating:
			ep.SetStalled(obs, false)
		case ulfm.Stalled:
			ep.SetStalled(obs, true)
		case ulfm.Unreached:
			// Not read yet, Timeout after this watch began: a connection
			// to a dead node gets no answer (nor a refusal) for as long as
			// it is tried. Ask the node, once a watch: a node that
			// answers lives, and the handshake ends as handshakes do.
			if asked != obs {
				var ok bool
				if nodes, ok = d.askNode(nodes, obs, now); ok {
					asked = obs
				}
			}
		case ulfm.Convicted:
			ep.MarkFailed(obs, fmt.Errorf("%w: its heartbeat did not move for %v, and %s (observed by world rank %d)",
				ErrSuspected, now.Sub(s.Moved()).Round(time.Millisecond), s.Why(), me))
			if s.Unanswered() {
				nodes, _ = d.askNode(nodes, obs, now)
			}
			obs = d.next(obs)
			d.setObserving(obs)
			s.Restart(now)
		}
		if left > 0 {
			deadline.Reset(left)
		}
	}
}

// runstate is fabric's word on a heartbeat thread as ulfm's rules take
// it: the same value (TestRunstate).
func runstate(r fabric.Runstate) ulfm.Runstate { return ulfm.Runstate(r) }

// nodeQuestion is a question to the node of a process convicted because
// its node stopped answering reads, or never reached: is the node there?
// (ulfm.NodeProbe.)
type nodeQuestion struct {
	d        *Detector
	w        int // the process whose node is asked
	p        *ulfm.NodeProbe
	answered func() bool
	stop     context.CancelFunc
}

// askNode adds to open a question to the node of w, at now, unless one
// is open (ok) or the node cannot be asked (this one, not over verbs, or
// w's address not read yet).
func (d *Detector) askNode(open []*nodeQuestion, w int, now time.Time) (_ []*nodeQuestion, ok bool) {
	ep := d.ep
	node := ep.Node(w)
	if node < 0 || node == ep.Node(d.me) {
		return open, false
	}
	if slices.ContainsFunc(open, func(q *nodeQuestion) bool { return ep.Node(q.w) == node }) {
		return open, true
	}
	ctx, cancel := context.WithCancel(context.Background())
	answered, err := ep.AskNode(ctx, w, d.o.Tick)
	if err != nil {
		cancel()
		return open, false
	}
	return append(open, &nodeQuestion{d: d, w: w, p: ulfm.NewNodeProbe(now, d.o.Timeout), answered: answered, stop: cancel}), true
}

// look weighs the node's answers at now, and reports whether the question
// is settled (and its asking stopped): the node answered, or it did not
// within the timeout and every process of it was convicted.
func (q *nodeQuestion) look(now time.Time) bool {
	if q.answered() {
		q.p.Answer()
	}
	v, _ := q.p.Look(now)
	switch v {
	case ulfm.Beating:
		q.stop()
		return true
	case ulfm.Convicted:
		q.stop()
		ep := q.d.ep
		for _, w := range ep.Joined() {
			if s := ep.State(w); w != q.d.me && ep.Node(w) == ep.Node(q.w) && (s == fabric.Alive || s == fabric.Stalled) {
				ep.MarkFailed(w, fmt.Errorf("%w: its node answered no connection for %v, after world rank %d there went silent (asked by world rank %d)",
					ErrSuspected, q.d.o.Timeout, q.w, q.d.me))
			}
		}
		return true
	}
	return false
}
