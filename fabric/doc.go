//go:build linux

// Package fabric is Rivet's runtime: the endpoint that reaches the
// processes of a job through providers (shared memory on a node,
// verbs/RDMA between nodes, chosen per peer), communicators and groups,
// tagged point-to-point messaging, schedules (the engine under the
// collectives), one-sided primitives, and the failure knowledge every
// layer consults (Failed, Health). How the processes first meet is
// package bootstrap's. See docs/fabric.md.
package fabric
