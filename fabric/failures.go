//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/internal/heartbeat"
)

// What a failure detector (package ft) reads and writes: the heartbeats
// of peers, and its verdicts. The fabric keeps the knowledge; the
// detector's protocol decides.

// ExitDeclaredFailed is the exit status of a process that ends because
// its peers declared it failed (its heartbeat thread ends it, whatever
// its goroutines are doing): not a crash, a verdict carried out.
const ExitDeclaredFailed = 99

// startHeartbeat starts this process's heartbeat over the words its
// providers expose, unless WithHeartbeat turned it off or no peer could
// read it.
func (ep *Endpoint) startHeartbeat() error {
	if ep.opts.beat == 0 || ep.shm == nil && ep.verbs == nil {
		return nil
	}
	var c heartbeat.Config
	if ep.shm != nil {
		c.Words = append(c.Words, ep.shm.Word(shmseg.WordBeat))
		c.Fences = append(c.Fences, ep.shm.Word(shmseg.WordFenced))
	}
	if ep.verbs != nil {
		c.Words = append(c.Words, ep.verbs.BeatWord())
		c.Fences = append(c.Fences, ep.verbs.FenceWord())
	}
	c.Period, c.Status = ep.opts.beat, ExitDeclaredFailed
	c.Message = fmt.Sprintf("rivet: world rank %d (pid %d) was declared failed by its peers and ends with status %d\n",
		ep.rank, os.Getpid(), ExitDeclaredFailed)
	b, err := heartbeat.Start(c)
	if err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	ep.beat = b
	ep.stalled = make([]bool, ep.size)
	return nil
}

// HeartbeatPeriod is this process's heartbeat period (WithHeartbeat), 0
// when it has none.
func (ep *Endpoint) HeartbeatPeriod() time.Duration {
	if ep.beat == nil {
		return 0
	}
	return ep.opts.beat
}

// A Beat is a reading of a process's heartbeat.
type Beat struct {
	// Count is the heartbeat's count: it grows by one each period while
	// the process lives.
	Count uint64
	// At is when the count was read; the heartbeat showed Count at or
	// before At. It is zero until a read has completed.
	At time.Time
}

// Seen reports whether the heartbeat has been read at all.
func (b Beat) Seen() bool { return !b.At.IsZero() }

// Heartbeat returns world rank w's heartbeat as this process last read
// it. On the node it is read as it stands; over verbs each call starts an
// RDMA read of it (unless one is in flight) and returns the last one's
// result, so a detector that calls it every tick sees a count at most a
// tick old, and At says how old. Each call also makes a round of
// progress, so a detector's ticks keep failure notices moving while the
// process computes outside the library. It returns w's failure once w is
// known failed or gone, and an error wrapping ErrNotSupported when w has
// no heartbeat this process can read.
func (ep *Endpoint) Heartbeat(w int) (Beat, error) {
	if w < 0 || w >= ep.size {
		return Beat{}, fmt.Errorf("%w: world rank %d of %d", ErrRank, w, ep.size)
	}
	e := ep.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return Beat{}, ErrClosed
	}
	// A round of progress and of the failure sources (pidfds, probes)
	// first: a detector calls this every tick, which keeps failure
	// notices moving while the process computes outside the library.
	e.progress()
	e.scan(nil)
	if err := e.failed[w]; err != nil {
		return Beat{}, err
	}
	if p := e.route[w]; p != nil && p.closed(w) {
		// It closed its endpoint (its heartbeat stopped there): stopped,
		// not failed, even while its process lives on.
		return Beat{}, fmt.Errorf("%w: world rank %d closed its endpoint", ErrClosed, w)
	}
	if ep.shm != nil {
		if word := ep.shm.PeerWord(w, shmseg.WordBeat); word != nil {
			return Beat{Count: atomic.LoadUint64(word), At: time.Now()}, nil
		}
	}
	if v := ep.verbs; v != nil && e.route[w] == v {
		count, at := v.Beat(w)
		return Beat{Count: count, At: at}, nil
	}
	return Beat{}, fmt.Errorf("fabric: world rank %d has no heartbeat this process reads: %w", w, ErrNotSupported)
}

// AskNode asks world rank w's node, over the network, whether it is
// there — for a detector that convicted w because its node stopped
// answering reads (ulfm.NodeProbe): every period until ctx ends or one is
// answered, a TCP connection to the port w's verbs handshakes come
// through. answered reports whether an answer came: a connection accepted
// or refused, either of which says the node's kernel runs. It fails with
// ErrNotSupported for a process this one does not reach over verbs (on
// its node there is the kernel's word instead) or whose address it never
// read.
func (ep *Endpoint) AskNode(ctx context.Context, w int, period time.Duration) (answered func() bool, err error) {
	if w < 0 || w >= ep.size || w == ep.rank || period <= 0 {
		return nil, fmt.Errorf("%w: asking world rank %d of %d's node every %v", ErrInvalid, w, ep.size, period)
	}
	e := ep.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	if v := ep.verbs; v != nil && e.route[w] == v {
		if answered, ok := v.Knock(ctx, w, period); ok {
			return answered, nil
		}
	}
	return nil, fmt.Errorf("fabric: world rank %d's node cannot be asked over the network: %w", w, ErrNotSupported)
}

// Failure returns what this process knows of world rank w's failure: an
// error matching ErrProcFailed (a *PeerError naming w) once w is known
// failed, nil otherwise. It is a lookup; Poll first to ask the failure
// sources.
func (ep *Endpoint) Failure(w int) error {
	if w < 0 || w >= ep.size {
		return nil
	}
	e := ep.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.failed[w]; err != nil && errors.Is(err, ErrProcFailed) {
		return e.peerError(nil, w, err)
	}
	return nil
}

// KnownFailed is how many processes this process knows to have failed.
// It only grows, and it is one atomic load: layers above the fabric (the
// one-sided windows of package rma) read it on their fast paths to learn
// whether they need to look at failures at all.
func (ep *Endpoint) KnownFailed() int { return int(ep.e.declared.Load()) }

// Poll makes one round of progress and of the failure sources (pidfds,
// probes), as every waiting call of the fabric does. A layer that waits
// on memory rather than on the fabric (a one-sided window polling its
// control words) calls it now and then, so that it learns of failures
// and its peers' notices move.
func (ep *Endpoint) Poll() {
	e := ep.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.progress()
	e.scan(nil)
}

// MarkFailed records a failure detector's verdict: world rank w failed,
// for cause. Every operation involving w fails with ErrProcFailed from
// now on (a PeerError that unwraps to cause); frames from w are dropped;
// w is fenced out — its fence word is set, so that w ends itself if it
// still runs, and its queue pair, if any, is moved to the error state.
// Suspicion is final: nothing clears it.
//
// A process that closed its endpoint on purpose is never failed: if w
// said goodbye before the verdict — its heartbeat stops in Close, after
// the goodbye, so a detector may judge it before this process read the
// goodbye — w is recorded stopped instead (State reports Stopped).
func (ep *Endpoint) MarkFailed(w int, cause error) error {
	if w < 0 || w >= ep.size || w == ep.rank {
		return fmt.Errorf("%w: world rank %d of %d (not this process's own)", ErrRank, w, ep.size)
	}
	e := ep.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	if !errors.Is(cause, ErrProcFailed) {
		cause = fmt.Errorf("%w: world rank %d: %w", ErrProcFailed, w, cause)
	}
	if e.failed[w] != nil && !upgrade(e.failed[w], cause) {
		return nil
	}
	if e.saidGoodbye(w) {
		e.markFailed(w, fmt.Errorf("%w: world rank %d closed its endpoint (a verdict came after its goodbye: %v)", ErrClosed, w, cause))
		return nil
	}
	e.markFailed(w, cause) // fences w and tells the others
	return nil
}

// PeerState is what this process knows of another.
type PeerState int

// The states of a peer. Known failed and stopped are final.
const (
	Alive   PeerState = iota // nothing is known to be wrong
	Stalled                  // its heartbeat is late, or it cannot be reached: not (yet) failed, a "known stalled image"
	Failed                   // known failed
	Stopped                  // it closed its endpoint (finalized normally)
)

func (s PeerState) String() string {
	switch s {
	case Alive:
		return "alive"
	case Stalled:
		return "stalled"
	case Failed:
		return "failed"
	case Stopped:
		return "stopped"
	}
	return fmt.Sprintf("PeerState(%d)", int(s))
}

// State reports what this process knows of world rank w.
func (ep *Endpoint) State(w int) PeerState {
	if w < 0 || w >= ep.size {
		return Alive
	}
	e := ep.e
	e.mu.Lock()
	defer e.mu.Unlock()
	switch err := e.failed[w]; {
	case err == nil:
	case errors.Is(err, ErrProcFailed):
		return Failed
	case errors.Is(err, ErrNoRoute):
		// Unreachable, not known failed: stalled until a verdict.
		return Stalled
	default:
		return Stopped
	}
	// (After Close the providers are gone: nothing more to ask them.)
	if p := e.route[w]; !e.closed && p != nil && w != ep.rank && p.closed(w) {
		return Stopped
	}
	if ep.stalled != nil && ep.stalled[w] {
		return Stalled
	}
	return Alive
}

// SetStalled records a failure detector's suspicion that world rank w is
// stalled (its heartbeat is late), or that it is not any more.
func (ep *Endpoint) SetStalled(w int, stalled bool) {
	e := ep.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if ep.stalled != nil && w >= 0 && w < ep.size {
		ep.stalled[w] = stalled
	}
}

// GetFailed returns the group of c's members this process knows to have
// failed (MPI_COMM_GET_FAILED), in the order it learned of them: a later
// call's group extends an earlier one's, with the same ranks for the
// same processes (prefix-stable). A process is in it before any
// operation reports its failure. An intercommunicator's counts the
// failures of both groups.
func (c *Comm) GetFailed() Group {
	if c.inter != nil {
		return c.inter.bridge.GetFailed()
	}
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	var ranks []int
	for _, w := range e.order {
		if c.index[w] >= 0 {
			ranks = append(ranks, w)
		}
	}
	g, _ := NewGroup(ranks) // distinct world ranks: cannot fail
	return g
}

// AckFailed acknowledges the failures of the first n members of the
// group GetFailed returns (MPI_COMM_ACK_FAILED) and returns how many are
// acknowledged now: never fewer than before, never more than GetFailed's
// size (AckFailed(0) only asks). While a failure is unacknowledged,
// receives and probes from AnySource on c raise errors: a blocking one
// ErrProcFailed, a nonblocking one's completion ErrProcFailedPending
// (the request stays active and matchable). Collectives keep failing
// after an acknowledgement; a shrunk communicator is the way on. An n of
// at least GetFailed's size (n > 0; AckAllFailed) also acknowledges the
// members known to have closed their endpoints (AckedClosed).
func (c *Comm) AckFailed(n int) int {
	if c.inter != nil {
		return c.inter.bridge.AckFailed(n)
	}
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	k := 0
	for _, w := range e.order {
		if c.index[w] >= 0 {
			k++
		}
	}
	c.acked = max(c.acked, min(n, k))
	if n > 0 && n >= k {
		// Every failure acknowledged: so are the members known closed,
		// so that an agreement they made raise (they contribute to none)
		// stops raising once every member has acknowledged them, as for
		// a failure (AckedClosed).
		for _, w := range c.ranks {
			if e.closedKnown(w) && !slices.Contains(c.ackedClosed, w) {
				c.ackedClosed = append(c.ackedClosed, w)
			}
		}
	}
	return c.acked
}

// AckedClosed returns the world ranks of c's members that closed their
// endpoints and whose closing this process has acknowledged: an AckFailed
// that acknowledges every failure GetFailed names (AckAllFailed) also
// acknowledges every member known closed then. Such a member is stopped,
// not failed — never in GetFailed — but it contributes to no agreement;
// package ft counts it acknowledged as it counts acknowledged failures,
// so the acknowledge-and-agree loop of MPI 4.1 Example 16.3 ends.
func (c *Comm) AckedClosed() []int {
	if c.inter != nil {
		return c.inter.bridge.AckedClosed()
	}
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(c.ackedClosed)
}

// closedKnown reports whether world rank w's closing is recorded here —
// and so told to package ft's protocols (markFailedNow); with e.mu held.
// (State also asks the providers, which may see a closed word first.)
func (e *engine) closedKnown(w int) bool {
	err := e.failed[w]
	return err != nil && !errors.Is(err, ErrProcFailed) && !errors.Is(err, ErrNoRoute)
}

// AckAllFailed acknowledges every failure of c's members this process
// knows of now and returns how many are acknowledged: the usual
// AckFailed(GetFailed().Size()) in one step, with no failure learned
// between the two calls left out.
func (c *Comm) AckAllFailed() int { return c.AckFailed(math.MaxInt) }

// FaultTolerant reports whether this endpoint tolerates process failures
// (MPI's MPI_FT attribute): operations involving a failed process raise
// errors instead of aborting the job, and failures are detected — always
// true of Rivet; HeartbeatPeriod says whether this process's heartbeat,
// which detectors need, runs.
func (ep *Endpoint) FaultTolerant() bool { return true }
