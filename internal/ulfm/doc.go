// Package ulfm holds the protocols of User-Level Failure Mitigation as
// pure state machines, the way etcd's raft package is built: what comes
// in — a message, a failure learned, a contribution, a clock tick — is a
// method call, and what goes out is a call of the send function the
// machine was made with, or state the caller reads (a decision). Nothing
// inside starts a goroutine, reads a clock or does I/O, so the same code
// runs in production, driven by package fabric and package ft over the
// job's transports, and in internal/ftsim's deterministic simulation of
// jobs far larger than any machine here.
//
// A machine is not safe for concurrent use: its driver serializes the
// calls (ft holds a lock around each). The send function must not call
// back into the machine; a driver queues what it is given.
//
// Ranks are a communicator's (0 to n-1); the machines know nothing of
// world ranks, endpoints or contexts.
package ulfm
