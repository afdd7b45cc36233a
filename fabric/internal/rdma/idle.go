//go:build linux

package rdma

import (
	"time"

	"github.com/rivet-hpc/rivet/verbs"
)

// A process with nothing to do need not spin while it waits. On
// soft-RoCE the NIC is the kernel, on the same CPUs as the process
// (under a hypervisor, on the same host CPUs as every other machine's
// NIC): a rank that spins takes the CPU the packets it waits for need.
// So the provider can put a waiting process to sleep until a completion
// arrives: every completion queue reports to one completion channel, and
// Arm and Sleep are the two halves of the standard event-driven wait —
// arm, look again, sleep.
//
// Some news raises no completion — credits and requests written into the
// control words by RDMA, a peer's goodbye — so a sleep is bounded, and
// a process that waits for those wakes at the bound.

// armed records which completion queues are armed: a queue stays armed
// until its next completion raises an event, so only those whose event
// was taken need arming again.
type armed struct {
	ch  *verbs.CompChannel
	cqs map[*verbs.CQ]bool // every CQ of the provider: armed or not
	// woke is the CQ whose event Sleep took, without the engine's lock;
	// the next Arm marks it unarmed.
	woke *verbs.CQ
}

// newEvents makes the completion channel every CQ reports to; nil if the
// device has none to give (then a process never sleeps on it).
func newEvents(dev *verbs.Context) *armed {
	ch, err := dev.NewCompChannel()
	if err != nil {
		return nil
	}
	return &armed{ch: ch, cqs: map[*verbs.CQ]bool{}}
}

// channel is what a new CQ reports to.
func (a *armed) channel() *verbs.CompChannel {
	if a == nil {
		return nil
	}
	return a.ch
}

// add counts cq among those Arm arms.
func (a *armed) add(cq *verbs.CQ) {
	if a != nil {
		a.cqs[cq] = false
	}
}

// CanSleep reports whether a waiting process can sleep on the provider's
// completions: whether the device gave it a completion channel.
func (v *Provider) CanSleep() bool { return v.events != nil }

// Arm readies a sleep: it takes the events that came since the last
// sleep, arms every completion queue not armed, and reports whether the
// process may sleep — false when a completion is already waiting (it
// raised no event if it landed before the arm) or when the provider
// cannot wake it. With the engine's lock held; only one goroutine sleeps
// at a time (the engine's idling flag).
func (v *Provider) Arm() bool {
	a := v.events
	if a == nil || v.closing {
		return false
	}
	if a.woke != nil {
		a.cqs[a.woke] = false
		a.woke = nil
	}
	for {
		cq, err := a.ch.Next(0)
		if err != nil {
			return false
		}
		if cq == nil {
			break
		}
		if _, ok := a.cqs[cq]; ok {
			a.cqs[cq] = false
		}
	}
	for cq, on := range a.cqs {
		if !on {
			if err := cq.Arm(false); err != nil {
				return false
			}
			a.cqs[cq] = true
		}
	}
	for cq := range a.cqs {
		if cq.Pending() {
			return false
		}
	}
	return true
}

// Sleep waits, after Arm and without the engine's lock, until a
// completion queue raises an event or d passes.
func (v *Provider) Sleep(d time.Duration) {
	if cq, err := v.events.ch.Next(d); err == nil && cq != nil {
		v.events.woke = cq
	}
}
