//go:build linux

package ft

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
)

// Detector defaults, for fabric.DefaultHeartbeat's period: a stalled
// process is convicted 10 periods after its heartbeat last moved (the
// issue's budget for a SIGSTOPped process is 300 ms).
const (
	DefaultTimeout = 10 * fabric.DefaultHeartbeat
	DefaultGrace   = time.Second
)

// Options tune a Detector. Zero values take the defaults.
type Options struct {
	// Timeout is how long an observed heartbeat may stand still before
	// the process is convicted (default 10 heartbeat periods). It must be
	// well above the period: the beat's thread is woken by the kernel,
	// and a loaded machine wakes it late.
	Timeout time.Duration
	// Tick is how often the observer looks (default half a period).
	Tick time.Duration
	// Grace is added to the first deadline, for peers still starting
	// (default DefaultGrace).
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

// Start starts this process's detector. Every process of the job should
// run one (each watches another); the endpoint must have a heartbeat
// (fabric.WithHeartbeat, on by default).
func Start(ep *fabric.Endpoint, o Options) (*Detector, error) {
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
		o.Tick = period / 2
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
	go d.run()
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

func (d *Detector) run() {
	defer close(d.done)
	ep, o := d.ep, d.o
	me := ep.World().Rank()
	t := time.NewTicker(o.Tick)
	defer t.Stop()
	now := time.Now()
	obs := d.next(me)
	d.setObserving(obs)
	// The heartbeat of obs last moved at moved (in the future during the
	// grace); count is what it showed then.
	moved, prev := now.Add(o.Grace), now
	var count uint64
	known := false
	for {
		select {
		case <-d.stop:
			return
		case now = <-t.C:
		}
		late := now.Sub(prev) > 2*o.Tick
		prev = now
		if obs < 0 {
			continue
		}
		c, seen, err := ep.Heartbeat(obs)
		if err != nil {
			// Known failed (by this detector, another, or any other
			// source) or stopped: watch the next one. A process with no
			// heartbeat this one can read is passed over too.
			ep.SetStalled(obs, false)
			obs = d.next(obs)
			d.setObserving(obs)
			moved, known = now.Add(o.Timeout/2), false
			continue
		}
		switch {
		case seen && (!known || c != count):
			count, known, moved = c, true, now
			ep.SetStalled(obs, false)
		case late:
			// Jitter guard: this process was not looking (descheduled,
			// or its own goroutines starved the ticker), so the silence
			// it measured is its own; start measuring afresh.
			moved = now
		case now.Sub(moved) > o.Timeout:
			ep.MarkFailed(obs, fmt.Errorf("%w: its heartbeat did not move for %v (observed by world rank %d)",
				ErrSuspected, now.Sub(moved).Round(time.Millisecond), me))
			obs = d.next(obs)
			d.setObserving(obs)
			moved, known = now.Add(o.Timeout/2), false
		case now.Sub(moved) > o.StalledAfter:
			ep.SetStalled(obs, true)
		}
	}
}

// ErrSuspected is the cause of a failure the detector declared: a
// heartbeat that stopped (it is wrapped in fabric.ErrProcFailed).
var ErrSuspected = errors.New("ft: suspected by the failure detector")
