//go:build linux

package fabric

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Waiting by event. A verbs device today is soft-RoCE: the NIC is the
// kernel, running on the CPUs the ranks run on — under a hypervisor, on
// the host CPUs every machine's NIC shares. A rank that spins while it
// waits takes the CPU from the packets it waits for. Across the two
// kernels of an rxevm cluster, osu_bw moved 1.3–1.7× as much at 1 B–1
// MiB once a waiting rank slept instead of spinning (docs/fabric.md).
// So when every peer of a process is reached over verbs on another node,
// a wait that found nothing for a few polls sleeps on the provider's
// completion channel until the next completion, or for idleWait at most
// (news that raises no completion — a goodbye written by RDMA — waits for
// that bound). Ranks of one node over RDMA loopback (RIVET_PROVIDER=verbs)
// keep spinning: their round trip is tens of microseconds, of the order
// of a sleep and a wake-up, and sleeping was measured across nodes only.

// idleWait bounds one sleep of an idle wait: what a peer's goodbye, the
// failure scan and a context's end may wait. (A wait with sends held for
// want of credits, which come by RDMA write, yields instead.)
const idleWait = 5 * time.Millisecond

// idleSpin is how many idle polls a wait spins before it sleeps.
const idleSpin = 16

// An idler is a provider a waiting process can sleep on.
type idler interface {
	// arm readies a sleep, with e.mu held; false means do not sleep
	// (something has arrived, or the provider cannot wake the process).
	arm() bool
	// sleep blocks, without e.mu, until something arrives or d passes.
	sleep(d time.Duration)
}

func (v *verbsProvider) arm() bool             { return v.Arm() }
func (v *verbsProvider) sleep(d time.Duration) { v.Sleep(d) }

// idle is one sleep of a wait on the idler, and reports whether it
// slept: not when another goroutine sleeps on it already, nor while sends
// wait for credits (which raise no completion), nor when something has
// arrived since the last poll.
func (e *engine) idle() bool {
	if !e.idling.CompareAndSwap(false, true) {
		return false
	}
	e.mu.Lock()
	ok := !e.closed && e.npend == 0 && e.idler.arm()
	e.mu.Unlock()
	if ok {
		e.idler.sleep(idleWait)
		e.waits.sleeps.Add(1)
	}
	e.idling.Store(false)
	return ok
}

// idleCounts counts the rounds of waits that went on past their spin:
// those that slept on the idler and those that yielded the CPU (or slept
// 50 µs) instead. A wait that sleeps by event yields only when a
// completion beat its arm; one that does not yields every round.
type idleCounts struct {
	sleeps, yields atomic.Uint64
}

// Wait modes (WithWaitMode, RIVET_WAIT).
const (
	// WaitAuto sleeps on completions when every peer is reached over
	// verbs on another node, and spins and yields otherwise.
	WaitAuto = "auto"
	// WaitPoll never sleeps on completions: a waiting call spins, then
	// yields the CPU, then sleeps 50 µs at a time once idle for long.
	WaitPoll = "poll"
)

func checkWaitMode(m string) (string, error) {
	switch m = strings.ToLower(m); m {
	case "":
		return WaitAuto, nil
	case WaitAuto, WaitPoll:
		return m, nil
	}
	return "", fmt.Errorf("%w: wait mode %q (want %s or %s)", ErrInvalid, m, WaitAuto, WaitPoll)
}
