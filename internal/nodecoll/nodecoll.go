// Package nodecoll hands the fabric's shared-memory collectives to
// packages collectives and ft without making them part of the fabric's
// API: they work on the fabric's segments, so they live there, but only
// those packages have a use for them. Package fabric sets the functions
// when it is loaded; their Comm and Schedule arguments are a
// *fabric.Comm and a *fabric.Schedule (typed any, since fabric imports
// this package).
package nodecoll

import "context"

// AllreduceMax is the longest vector (in bytes) Allreduce carries.
const AllreduceMax = 4096

// AgreeWords is the most words an Agree contribution holds.
const AgreeWords = 15

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
	// Agree is attempt k (from 1, the same at every member) of package
	// ft's agreement through shared memory: it publishes words and, once
	// every member has published attempt k, calls fold with each one's
	// words, in rank order. It reports fell, having folded nothing, when
	// the attempt was abandoned: a member failed without publishing (at
	// every member alike — then they agree over messages instead). served
	// is false, doing nothing, unless comm is the world communicator and
	// every process is on this node. When ctx ends the contribution stays
	// published: calling again with the same k waits on.
	Agree func(ctx context.Context, comm any, k uint64, words []uint64, fold func(rank int, words []uint64)) (served, fell bool, err error)
)
