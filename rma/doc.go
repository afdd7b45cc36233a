//go:build linux

// Package rma is one-sided communication (MPI's RMA): windows of memory
// that the processes of a communicator expose to each other, and Put,
// Get, Accumulate, GetAccumulate, FetchAndOp and CompareAndSwap on them,
// inside access epochs opened by Fence, Start/Complete (with Post/Wait at
// the targets), or Lock/Unlock and LockAll/UnlockAll.
//
// Everything is truly one-sided: a target that computes, sleeps or
// blocks elsewhere delays no origin. On a node, window memory lives in
// shared pages that every process of the node maps, so puts and gets are
// copies and atomics are CPU atomics; across nodes (or with
// RIVET_PROVIDER=verbs) they are RDMA writes, reads and NIC atomics. Lock
// words, PSCW's post and complete counters and fence's barrier are words
// in each target's control memory, driven by the same atomics and
// writes: no message matching, no progress goroutine, no target CPU.
//
// A window has one atomicity domain: CPU atomics when all its processes
// share memory, NIC atomics otherwise — then even a process on the
// target's node updates the target's words through its own NIC, on its
// registration of the shared pages — because NIC and CPU atomics on one
// word are not atomic with respect to each other. Accumulates the NIC
// cannot do natively (any op but an 8-byte integer sum, elements under 8
// bytes) are compare-and-swap loops on the aligned 8-byte words that
// hold the elements, which keeps MPI's per-element atomicity among all
// accumulate-family calls.
//
// Under failure (MPI's §16.2.5, §16.3.2) a synchronization that needs a
// failed process raises an error matching fabric.ErrProcFailed instead
// of waiting; a lock whose holder died is recognized from the lock words
// and can never be taken again; Window.Revoke revokes a window at every
// live member; and Window.Undefined reports, on the target and on the
// origin, exactly which ranges a failure made undefined — origins record
// the ranges they write in the target's memory before the data (range
// records, which Info.NoRangeRecords turns off). See docs/rma.md.
package rma
