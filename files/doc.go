//go:build linux

// Package files is parallel file I/O over a communicator (MPI-IO, MPI
// 4.1 chapter 14) with its fault-tolerance semantics (§16.2.6, §16.3.3):
// files opened collectively, views that give each process its part of a
// file (strided and subarray filetypes), independent and collective
// reads and writes at explicit offsets, individual and shared file
// pointers, nonblocking forms of them, and Revoke.
//
// Collective access is two-phase I/O when the processes' pieces
// interleave finely: a few aggregators gather the pieces over the fabric
// and write (or read) large contiguous ranges; accesses already in
// large pieces go straight between each process's buffer and the file
// (Hints). Under failure, a collective access that a failed process kept
// from completing raises an IOError that names the file ranges left
// undefined and matches fabric.ErrProcFailed; as MPI allows, a process
// that did not exchange data with the failed one may return success, so
// programs that must know agree on the outcome (ft.Agree) — see
// examples/ftcheckpoint and docs/io.md.
package files
