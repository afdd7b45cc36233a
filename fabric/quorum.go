//go:build linux

package fabric

import (
	"errors"
	"fmt"
	"os"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// A job across nodes can be cut in two: a partition, or one node that
// stopped for longer than the timeouts and came back. Each side then
// learns that the other failed, and without a rule both would live on as
// two jobs, each writing results the other does not know of. The rule
// is a quorum of nodes (ulfm.Quorum): a process goes on only while the
// nodes it still sees — those with a process not known failed, its own
// among them — are a strict majority of the job's nodes, or exactly half
// of them with the node of world rank 0 among them. Otherwise it ends
// itself, as a fenced process does (ExitDeclaredFailed). The side it
// leaves, if it was cut off rather than the others dead, has fenced it
// already.
//
// The price: a process cannot tell a partition from the death of the
// nodes it lost, so a job whose majority of nodes dies ends too (in a
// job of two nodes, the death of world rank 0's node ends the other).
// Within one node the kernel's word is certain and no partition can
// happen, so a job on one node never counts.

// WithQuorum turns the quorum rule on or off for a job across nodes: on
// (the default), a process that sees no majority of the job's nodes —
// counting the half with world rank 0's node as one — ends itself with
// ExitDeclaredFailed rather than live on beside the side that fenced it.
// Off, every side of a partition goes on, each knowing the other failed:
// for jobs whose network cannot partition and that would rather survive
// the loss of most of their nodes. RIVET_FT_QUORUM=off sets the same.
func WithQuorum(on bool) Option { return func(o *options) { o.quorum = on } }

// checkQuorum ends this process when it sees no quorum of nodes; with
// e.mu held, after a failure was declared.
func (e *engine) checkQuorum() {
	if e.nodeOf == nil {
		return
	}
	// Failed, not gone: a process that closed on purpose is no sign of a
	// partition, and a job's ranks close at their own pace.
	seen, nodes, ok := ulfm.Quorum(e.nodeOf, e.me, func(w int) bool { return errors.Is(e.failed[w], ErrProcFailed) })
	if ok {
		return
	}
	fmt.Fprintf(os.Stderr, "rivet: world rank %d (pid %d) sees %d of the job's %d nodes, no majority, "+
		"and ends with status %d: it cannot tell whether they failed or it was cut off from them (fabric.WithQuorum)\n",
		e.me, os.Getpid(), seen, nodes, ExitDeclaredFailed)
	os.Exit(ExitDeclaredFailed)
}
