//go:build !amd64

package rxe

import "sync/atomic"

// storeRelease stores v at *p with release semantics.
func storeRelease(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
