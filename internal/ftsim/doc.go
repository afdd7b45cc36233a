// Package ftsim is a deterministic discrete-event simulation of a job's
// fault-tolerance protocols at sizes no machine here can run: up to
// 65,536 processes, each running internal/ulfm's state machines — the
// code production runs — over a modelled machine and network.
//
// The model (Model) is LogGP's: a message costs its sender and its
// receiver CPU time (O), leaves its sender's NIC no sooner than a gap
// after the last (G, and a time per byte), and takes a latency that is a
// node's (LNode) or the network's (LNet), stretched at random by up to
// Jitter. Processes live on nodes of PPN. A process may be descheduled
// before it handles an event (Stall, for up to StallMax): the scheduling
// delays that were behind the detector's false positives. Heartbeats beat
// every Period; observers look every Tick and judge with ulfm.Silence.
//
// One run is a Scenario played from a seed: which protocol the processes
// run (agree, revoke, shrink, a node agreement, or a reference
// collective), which processes fail, how (killed, a node's all at once,
// not run for a while but alive, cut off by a partition) and when — at a
// time, or when a process sends a given message of the protocol. Draw
// makes scenarios by families of schedules. Every random choice comes
// from the seed, and
// events at the same simulated time are ordered by when they were made,
// so a seed replays exactly. Check verifies what the protocols promise;
// a violation names its seed.
package ftsim
