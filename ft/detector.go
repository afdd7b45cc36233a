//go:build linux

package ft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

// Detector defaults, for fabric.DefaultHeartbeat's period: a stalled
// process is convicted 10 periods after its heartbeat last moved (the
// issue's budget for a SIGSTOPped process is 300 ms).
const (
	DefaultTimeout = 10 * fabric.DefaultHeartbeat
	DefaultGrace   = 30 * time.Second
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
}

// Detector is this process's part of the job's failure detector: it
// observes one other process at a time — its nearest predecessor in world
// rank order that is not known failed or stopped — and convicts it when
// its heartbeat stops.
type Detector struct {
	ep   *fabric.Endpoint
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
// have a heartbeat (fabric.WithHeartbeat, on by default).
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
	if o.Timeout < 2*period || o.Tick <= 0 || o.Tick > o.Timeout/2 || o.Grace < 0 || o.StalledAfter > o.Timeout {
		return nil, fmt.Errorf("ft: detector timeout %v, tick %v, grace %v, stalled after %v with a %v heartbeat: %w",
			o.Timeout, o.Tick, o.Grace, o.StalledAfter, period, fabric.ErrInvalid)
	}
	d := &Detector{ep: ep, o: o, stop: make(chan struct{}), done: make(chan struct{}), observing: -1}
	obs := d.next(ep.World().Rank())
	if obs >= 0 {
		ctx, cancel := context.WithTimeout(ctx, o.Grace)
		defer cancel()
		for {
			b, err := ep.Heartbeat(obs)
			if err != nil {
				return nil, fmt.Errorf("ft: reading world rank %d's heartbeat: %w", obs, err)
			}
			if b.Seen() {
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("ft: no heartbeat of world rank %d: %w", obs, ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	if err := collectives.Barrier(ctx, ep.World()); err != nil {
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
// that is not known failed or stopped, or -1 when there is none but this
// process.
func (d *Detector) next(from int) int {
	ep := d.ep
	n, me := ep.World().Size(), ep.World().Rank()
	for i := 1; i < n; i++ {
		w := ((from-i)%n + n) % n
		if w == me {
			return -1
		}
		if s := ep.State(w); s == fabric.Alive || s == fabric.Stalled {
			return w
		}
	}
	return -1
}

func (d *Detector) setObserving(w int) {
	d.mu.Lock()
	d.observing = w
	d.mu.Unlock()
}

func (d *Detector) run(obs int) {
	defer close(d.done)
	ep := d.ep
	me := ep.World().Rank()
	t := time.NewTicker(d.o.Tick)
	defer t.Stop()
	// deadline fires when the silence reaches Timeout between two ticks.
	deadline := time.NewTimer(time.Hour)
	deadline.Stop()
	defer deadline.Stop()
	now := time.Now()
	d.setObserving(obs)
	s := silence{o: d.o}
	s.restart(now)
	for {
		select {
		case <-d.stop:
			return
		case now = <-t.C:
		case now = <-deadline.C:
		}
		deadline.Stop()
		if obs < 0 {
			s.prev = now
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
			s.restart(now)
			continue
		}
		v, left := s.look(now, b)
		switch v {
		case beating:
			ep.SetStalled(obs, false)
		case stalled:
			ep.SetStalled(obs, true)
		case convicted:
			ep.MarkFailed(obs, fmt.Errorf("%w: its heartbeat did not move for %v (observed by world rank %d)",
				ErrSuspected, now.Sub(s.moved).Round(time.Millisecond), me))
			obs = d.next(obs)
			d.setObserving(obs)
			s.restart(now)
		}
		if left > 0 {
			deadline.Reset(left)
		}
	}
}

// A verdict is what one look at a heartbeat concludes.
type verdict int

const (
	quiet     verdict = iota // nothing new
	beating                  // the count changed
	stalled                  // silent for StalledAfter
	convicted                // silent for Timeout
)

// silence measures how long one observed heartbeat has stood still.
type silence struct {
	o     Options
	moved time.Time // no earlier than the last beat seen
	prev  time.Time // the last look
	count uint64    // what the heartbeat showed at moved
	known bool      // a count has been seen
}

// restart measures afresh from now, with no count known (a new observed
// process).
func (s *silence) restart(now time.Time) {
	s.moved, s.prev, s.known = now, now, false
}

// look takes the reading b that a look at now found, and returns the
// verdict and, when the silence will reach Timeout before the next tick,
// how long until then (0 otherwise): looking again then convicts at the
// timeout itself, not a tick after it (ticks come microseconds late, so
// a silence of 199.99 ms at a tick waited a whole tick more, half the
// time).
func (s *silence) look(now time.Time, b fabric.Beat) (v verdict, left time.Duration) {
	late, prev := now.Sub(s.prev) > 2*s.o.Tick, s.prev
	s.prev = now
	switch {
	case b.Seen() && (!s.known || b.Count != s.count):
		// The beat came before the read that showed it — over verbs a
		// tick before this look, if the process was polling — and after
		// the last look, which had not seen it.
		s.count, s.known, s.moved = b.Count, true, b.At
		if b.At.Before(prev) || b.At.After(now) {
			s.moved = now
		}
		return beating, 0
	case late || !s.known:
		// Jitter guard: this process was not looking (descheduled, or its
		// own goroutines starved the ticker), so the silence it measured
		// is its own; start measuring afresh. And a heartbeat never read
		// yet (a new observed process, not yet connected) convicts nobody:
		// a connection that cannot be made fails the process by itself.
		s.moved = now
		return quiet, 0
	case now.Sub(s.moved) >= s.o.Timeout:
		return convicted, 0
	}
	if left = s.o.Timeout - now.Sub(s.moved); left >= s.o.Tick {
		left = 0
	}
	if now.Sub(s.moved) >= s.o.StalledAfter {
		return stalled, left
	}
	return quiet, left
}
