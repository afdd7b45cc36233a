package rxe

// storeRelease stores v at *p with release semantics and no locked
// instruction: x86-64 never makes a store visible before earlier ones,
// and Go's compiler does not move memory accesses across a call into
// assembly, so a plain store is the release rdma-core's providers make
// (a compiler barrier, then a store). sync/atomic's store is an xchg, a
// locked instruction, on every index publish of every ring.
//
//go:noescape
func storeRelease(p *uint32, v uint32)
