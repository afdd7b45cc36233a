package ulfm

import (
	"fmt"
	"slices"
	"time"
)

// The failure detector's rules (SC'16's observation ring): each process
// observes one other — its nearest predecessor, in rank order, that is
// not known failed or stopped (Predecessor) — and convicts it when its
// heartbeat stands still (Silence). A conviction is final, and the ring
// passes over the convicted process.

// Predecessor is the nearest predecessor of rank from (not from itself)
// in ranks — the processes process me reaches, in order — for which
// watchable is true, or -1 when there is none but me.
func Predecessor(ranks []int, from, me int, watchable func(w int) bool) int {
	n := len(ranks)
	at := slices.Index(ranks, from)
	if at < 0 {
		// from is not in ranks (cannot happen for a process's own rank):
		// start from its place in the order.
		at, _ = slices.BinarySearch(ranks, from)
	}
	for i := 1; i <= n; i++ {
		w := ranks[((at-i)%n+n)%n]
		if w == me {
			return -1
		}
		if watchable(w) {
			return w
		}
	}
	return -1
}

// A Verdict is what one look at a heartbeat concludes.
type Verdict uint8

// The verdicts.
const (
	Quiet     Verdict = iota // nothing new
	Beating                  // the count changed
	Stalled                  // silent for StalledAfter
	Convicted                // silent for Timeout, and the evidence says it cannot run
	Unreached                // never read, Timeout after the watch began: ask its node (NodeProbe)
)

// Times are a detector's: how long a heartbeat may stand still before
// its process is reported stalled (StalledAfter) and convicted
// (Timeout; Unconfirmed where its node's kernel cannot be asked and its
// memory still answers), and how often the observer looks (Tick).
type Times struct {
	Timeout, Tick, StalledAfter, Unconfirmed time.Duration
}

// Reading is one read of a heartbeat: its count, and when the read was
// answered (the heartbeat showed Count at or before At). A zero At is no
// read yet.
type Reading struct {
	Count uint64
	At    time.Time
}

// Runstate is what an observed process's node's kernel says of its
// heartbeat thread.
type Runstate uint8

// The kernel's answers.
const (
	RunUnknown Runstate = iota // not on this node, or unreadable
	RunWaiting                 // runnable, or in the kernel: the machine owes it time
	RunAsleep                  // asleep, as between beats
	RunFrozen                  // its cgroup is frozen
	RunStopped                 // stopped or traced
	RunGone                    // exited, or a zombie
)

func (r Runstate) String() string {
	switch r {
	case RunWaiting:
		return "waiting to run"
	case RunAsleep:
		return "asleep"
	case RunFrozen:
		return "frozen"
	case RunStopped:
		return "stopped"
	case RunGone:
		return "gone"
	}
	return "unknown"
}

// Silence measures how long one observed heartbeat has stood still, and
// weighs the evidence before a verdict: the observer's rules of the
// failure detector (ft.Detector drives it with real reads and the
// kernel's word; internal/ftsim with modelled ones).
type Silence struct {
	o     Times
	since time.Time // the watch's start
	moved time.Time // no earlier than the last beat seen
	prev  time.Time // the last look
	count uint64    // what the heartbeat showed at moved
	known bool      // a count has been seen
	// absent is the observer's own silence since moved, and unheard
	// since the last read answered (heard): of each interval between
	// two looks, what exceeds two ticks.
	absent, unheard time.Duration
	heard           time.Time
	why             string // the evidence of a conviction
	deaf            bool   // the last conviction was for unanswered reads
}

// NewSilence is a measure under times o, started at now.
func NewSilence(o Times, now time.Time) *Silence {
	s := &Silence{o: o}
	s.Restart(now)
	return s
}

// Restart measures afresh from now, with no count known (a new observed
// process).
func (s *Silence) Restart(now time.Time) {
	s.since, s.moved, s.prev, s.known, s.absent, s.deaf = now, now, now, false, 0, false
	s.heard, s.unheard = time.Time{}, 0
}

// Look takes the reading b that a look at now found, and returns the
// verdict and, when the silence will reach Timeout before the next tick,
// how long until then (0 otherwise): looking again then convicts at the
// timeout itself, not a tick after it (ticks come microseconds late, so
// a silence of 199.99 ms at a tick waited a whole tick more, half the
// time).
//
// Once the silence reaches Timeout, Look asks probe what the observed
// process's node says of its heartbeat thread, and convicts only on
// evidence (see judge).
func (s *Silence) Look(now time.Time, b Reading, probe func() Runstate) (v Verdict, left time.Duration) {
	prev := s.prev
	if gap := now.Sub(prev); gap > 2*s.o.Tick {
		// This process was not looking (descheduled, or its own
		// goroutines starved the ticker): a silence measured across that
		// may be its own, and only the kernel's word counts it (see
		// judge).
		s.absent += gap - 2*s.o.Tick
		s.unheard += gap - 2*s.o.Tick
	}
	s.prev = now
	if !b.At.Equal(s.heard) {
		// A read was answered since the last look. (One the observer's
		// own node did not send while it was held is not unanswered.)
		s.heard, s.unheard = b.At, 0
	}
	switch {
	case !b.At.IsZero() && (!s.known || b.Count != s.count):
		// The beat came before the read that showed it, and after the
		// last look, which had not seen it. The measure starts at the
		// read — never earlier, or a read that was itself late (its
		// goroutine descheduled after the tick) would make a silence
		// out of the delay — unless the read is older than the last look.
		s.count, s.known, s.moved, s.absent = b.Count, true, b.At, 0
		if b.At.Before(prev) {
			s.moved = now
		}
		return Beating, 0
	case !s.known:
		// A heartbeat never read yet (a new observed process, not yet
		// connected) convicts nobody by itself. A connection refused
		// fails the process; one that gets no answer may be to a dead
		// node, which never answers: after Timeout, its node is asked.
		s.moved, s.absent = now, 0
		if now.Sub(s.since) >= s.o.Timeout {
			return Unreached, 0
		}
		return Quiet, 0
	case now.Sub(s.moved) >= s.o.Timeout:
		return s.judge(now, b, probe), 0
	}
	if left = s.o.Timeout - now.Sub(s.moved); left >= s.o.Tick {
		left = 0
	}
	if now.Sub(s.moved) >= s.o.StalledAfter {
		return Stalled, left
	}
	return Quiet, left
}

// judge weighs a silence of at least Timeout: it convicts a process its
// node's kernel says is stopped, frozen or gone; never one that waits to
// run or sleeps — a busy machine or a throttled cgroup starves a live
// heartbeat for as long as it likes, a virtual machine's held CPU keeps
// a sleeping one asleep past its timer, and that is slowness, not
// failure. Where the kernel cannot be asked (another node), a process
// convicts when its memory no longer answers reads, or when it answers
// but does not beat for Unconfirmed.
func (s *Silence) judge(now time.Time, b Reading, probe func() Runstate) Verdict {
	switch rs := probe(); rs {
	case RunStopped, RunFrozen, RunGone:
		s.why = "its node's kernel says it is " + rs.String()
		return Convicted
	case RunAsleep, RunWaiting:
		return Stalled
	}
	// Jitter guard: without the kernel's word, a silence (and a read
	// unanswered) counts only the time this process was looking. It is
	// not a window free of late looks: a loaded host makes some look late
	// every few seconds, and a dead node would then never be convicted.
	silence := now.Sub(s.moved) - s.absent
	switch {
	case silence < s.o.Timeout:
		return Stalled
	case now.Sub(b.At)-s.unheard >= s.o.Timeout/2:
		s.why = fmt.Sprintf("no read of it was answered for %v", now.Sub(b.At).Round(time.Millisecond))
		s.deaf = true
		return Convicted
	case silence >= s.o.Unconfirmed:
		s.why = "its node cannot say why"
		return Convicted
	}
	return Stalled
}

// Why is the evidence of the last conviction.
func (s *Silence) Why() string { return s.why }

// Unanswered reports whether the last conviction was for reads its node
// no longer answered: the evidence that calls for a NodeProbe.
func (s *Silence) Unanswered() bool { return s.deaf }

// Moved is when the heartbeat was last seen to move (or the measure
// started).
func (s *Silence) Moved() time.Time { return s.moved }
