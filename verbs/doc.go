//go:build linux

// Package verbs is RDMA verbs for Go without cgo: it opens
// /dev/infiniband/uverbsN, issues the kernel's uverbs commands itself, and
// drives the device's queues from user space through a provider. The first
// provider is soft-RoCE (rdma_rxe).
//
// The objects are those of libibverbs, with Go names: Context (ibv_context),
// PD, MR, CQ, CompChannel, QP. Posting and polling allocate nothing and
// poll makes no system call; posting makes one (rxe's doorbell) per batch.
// Every object has an idempotent Close; a parent refuses to close while it
// has children (ErrBusy).
//
// Concurrency: distinct QPs and CQs may be used from different goroutines.
// A QP's send side and receive side are each locked, as is a CQ's poll, so
// sharing one object between goroutines is safe but serializes them. A
// caller that serializes its own calls can turn those locks off
// (QPConfig.Unlocked, CQConfig.Unlocked).
//
// See docs/verbs.md for the model, the error semantics and the numbers.
package verbs
