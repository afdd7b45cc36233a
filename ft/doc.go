// Package ft holds the protocols of User-Level Failure Mitigation that
// produce and act on failure knowledge; the knowledge itself — who is
// known failed, stalled or stopped — lives in package fabric, where every
// layer consults it.
//
// The failure detector (Detector) is the SC'16 design: an observation
// ring in which each process watches one other, repaired around the
// processes it convicts, with a start-up grace and a jitter guard. What
// it watches is each process's heartbeat (fabric.WithHeartbeat): a count
// that a thread outside the Go scheduler advances every period, read with
// a load on the node and an RDMA read across nodes — so neither the
// watched process's CPU nor its message matching takes part, and a
// process computing for seconds outside the library is never suspected.
// A heartbeat that stands still convicts only on evidence that the
// process cannot run: on its node, the kernel's word that its heartbeat
// thread is stopped, frozen or gone (one that waits for a CPU, however
// long, is stalled, not failed); across nodes, reads of it that go
// unanswered, or Options.Unconfirmed. A verdict is final: the fabric
// fences the convicted process out, and its own heartbeat thread ends it
// if it still runs.
//
// Revoking a communicator is fabric's (Comm.Revoke): it is state every
// operation checks, spread by the broadcast failure notices use.
//
// Agreement (Agree, IAgree) is ERA, the early-returning agreement, on a
// lazily repaired tree over the communicator's fault-tolerance channel
// (fabric.FTHandler): every survivor decides the same value and raises
// the same error, and a decision outlives the process that made it; on
// the world communicator of a one-node job the blocking agreements go
// through shared memory while nobody fails. Shrink makes the survivors' communicator with one agreement on the
// failed group and the context id. Importing this package also gives
// fabric's error-uniformity keys the agreement they need, blocking and
// nonblocking collectives alike. docs/ft.md
// has the details; examples/ft* are MPI 4.1's examples of them.
package ft
