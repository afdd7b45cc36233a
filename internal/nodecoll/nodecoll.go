// Package nodecoll hands the fabric's shared-memory collectives to
// package collectives without making them part of the fabric's API: they
// work on the fabric's segments, so they live there, but only the
// collectives have a use for them. Package fabric sets the functions
// when it is loaded; their Comm and Schedule arguments are a
// *fabric.Comm and a *fabric.Schedule (typed any, since fabric imports
// this package).
package nodecoll

import "context"

// AllreduceMax is the longest vector (in bytes) Allreduce carries.
const AllreduceMax = 4096

var (
	// Sync is a blocking barrier through shared memory. It reports false,
	// doing nothing, unless comm is the world communicator and every
	// process is on this node.
	Sync func(ctx context.Context, comm any) (bool, error)
	// Barrier adds to a schedule a round that synchronizes through shared
	// memory, and reports whether it could.
	Barrier func(schedule any) bool
	// Allreduce is a blocking allreduce of at most AllreduceMax bytes
	// through slots in shared memory; false if it cannot serve.
	Allreduce func(ctx context.Context, comm any, acc []byte, fn func(in, inout []byte)) (bool, error)
	// AllreduceChunks is a blocking allreduce of any size through chunks
	// staged in shared memory, elem bytes an element; false if it cannot
	// serve.
	AllreduceChunks func(ctx context.Context, comm any, send, acc []byte, elem int, fn func(in, inout []byte)) (bool, error)
)
