//go:build linux

package fabric

import (
	"errors"
	"fmt"

	"github.com/rivet-hpc/rivet/fabric/internal/shm"
	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/verbs"
)

// The sentinels the layers below define are the same values here, so one
// errors.Is test covers an error from any layer.
var (
	// ErrInvalid is wrapped by every rejected argument (verbs.ErrInvalid).
	ErrInvalid = verbs.ErrInvalid
	// ErrNotSupported is returned for what the providers in use cannot do
	// (hw.ErrNotSupported, as verbs.ErrNotSupported).
	ErrNotSupported = hw.ErrNotSupported
	// ErrNotFound is returned for what is not there, such as a key a rank
	// did not put (bootstrap.ErrNotFound, hw.ErrNotFound).
	ErrNotFound = hw.ErrNotFound
)

// Errors returned by communicators and requests; match them with errors.Is.
// ErrRank, ErrTag, ErrComm and ErrGroup also match ErrInvalid.
var (
	// ErrRank: a rank that is not in the communicator.
	ErrRank = fmt.Errorf("fabric: invalid rank: %w", ErrInvalid)
	// ErrTag: a tag outside 0..MaxTag (or AnyTag where a receive allows it).
	ErrTag = fmt.Errorf("fabric: invalid tag: %w", ErrInvalid)
	// ErrComm: a nil communicator, or one already freed.
	ErrComm = fmt.Errorf("fabric: invalid communicator: %w", ErrInvalid)
	// ErrGroup: a group that does not fit the call.
	ErrGroup = fmt.Errorf("fabric: invalid group: %w", ErrInvalid)
	// ErrTruncated: a message longer than the receive buffer. The part that
	// fits was received.
	ErrTruncated = errors.New("fabric: message truncated")
	// ErrProcFailed: a process the operation depends on has failed.
	ErrProcFailed = errors.New("fabric: process failed")
	// ErrProcFailedPending: a receive from AnySource cannot be sure to
	// complete because a possible sender has failed; the request is still
	// active (ULFM's MPI_ERR_PROC_FAILED_PENDING).
	ErrProcFailedPending = errors.New("fabric: process failed, receive still pending")
	// ErrRevoked: the communicator was revoked (Comm.Revoke, here or at
	// another member); only agreement and shrink still work on it
	// (ULFM's MPI_ERR_REVOKED).
	ErrRevoked = errors.New("fabric: communicator revoked")
	// ErrNoRoute: no provider reaches the peer.
	ErrNoRoute = errors.New("fabric: no provider reaches the peer")
	// ErrClosed: the endpoint was closed.
	ErrClosed = errors.New("fabric: endpoint closed")
)

// Errors of requests, schedules and collectives.
var (
	// ErrMismatch is returned when the processes of a collective disagree
	// on its arguments (a count, a root, an operation) as far as the
	// messages show.
	ErrMismatch = errors.New("fabric: collective arguments differ between processes")

	// ErrScheduleStarted is returned when a schedule is changed after Start.
	ErrScheduleStarted = errors.New("fabric: schedule already started")

	// ErrRequestDone is returned for a copy of a Request handle whose
	// operation was already completed through another copy.
	ErrRequestDone = errors.New("fabric: request already completed")

	// ErrAborted is the error of a collective whose wait was abandoned (its
	// context ended): it was withdrawn at this process.
	ErrAborted = errors.New("fabric: collective aborted")
	// ErrSpawn is the class of a spawn that failed (MPI_ERR_SPAWN): at the
	// root, the launcher's refusal, a command that cannot be run, or
	// children that died or gave up before they joined; at the other
	// members, the root's failure to spawn. Nothing a failed spawn
	// started joins the job.
	ErrSpawn = errors.New("fabric: spawn failed")
)

// errPeerGone is what a provider says when the peer's process is gone
// (the shared-memory provider's process_vm_readv of it found no
// process); the engine turns it into a PeerError matching ErrProcFailed.
var errPeerGone = shm.ErrPeerGone

// PeerError says that an operation failed because of one peer: it failed,
// or could not be reached. It matches ErrProcFailed (or ErrNoRoute) with
// errors.Is, and unwraps to the cause the fabric observed.
type PeerError struct {
	Rank      int   // in the communicator of the operation (an intercommunicator's remote group), -1 if not in it
	WorldRank int   // in the job
	Err       error // ErrProcFailed or ErrNoRoute, wrapping the cause
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("rank %d (world rank %d): %v", e.Rank, e.WorldRank, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

func procFailed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProcFailed}, args...)...)
}
