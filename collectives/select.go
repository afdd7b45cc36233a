//go:build linux

package collectives

import (
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rivet-hpc/rivet/internal/nodecoll"
)

// Algorithm names a collective algorithm.
type Algorithm string

// The algorithms. Auto lets the selection table choose.
const (
	Auto              Algorithm = ""
	Dissemination     Algorithm = "dissemination"      // barrier
	Tree              Algorithm = "tree"               // barrier: binomial gather and release
	SharedFlags       Algorithm = "shared_flags"       // barrier: epochs in shared memory (world, one node)
	Binomial          Algorithm = "binomial"           // bcast, reduce, gather, scatter
	ScatterAllgather  Algorithm = "scatter_allgather"  // bcast (van de Geijn)
	RecursiveDoubling Algorithm = "recursive_doubling" // allreduce, allgather (2^k ranks), scan
	Ring              Algorithm = "ring"               // allreduce (commutative), allgather(v), reduce_scatter
	ReduceBcast       Algorithm = "reduce_bcast"       // allreduce
	SharedSlots       Algorithm = "shared_slots"       // allreduce: vectors in shared memory (world, one node, ≤ 4 KiB)
	SharedChunks      Algorithm = "shared_chunks"      // allreduce: chunks staged in shared memory (world, one node)
	Rabenseifner      Algorithm = "rabenseifner"       // allreduce: recursive halving + doubling
	Linear            Algorithm = "linear"             // gather(v), scatter(v), alltoall(v)
	Pairwise          Algorithm = "pairwise"           // alltoall(v)
	Bruck             Algorithm = "bruck"              // allgather, alltoall
	ReduceScatterv    Algorithm = "reduce_scatterv"    // reduce_scatter: reduce, then scatter(v)
)

// The collectives whose algorithm can be chosen, and what each offers.
var algorithms = map[string][]Algorithm{
	"barrier":        {SharedFlags, Dissemination, Tree},
	"bcast":          {Binomial, ScatterAllgather},
	"reduce":         {Binomial},
	"allreduce":      {SharedSlots, SharedChunks, RecursiveDoubling, Ring, Rabenseifner, ReduceBcast},
	"gather":         {Binomial, Linear},
	"scatter":        {Binomial, Linear},
	"allgather":      {RecursiveDoubling, Ring, Bruck},
	"allgatherv":     {Ring},
	"alltoall":       {Bruck, Pairwise, Linear},
	"alltoallv":      {Pairwise, Linear},
	"reduce_scatter": {Ring, ReduceScatterv},
	"scan":           {RecursiveDoubling},
}

var (
	forceMu sync.Mutex                           // serializes Force
	forced  atomic.Pointer[map[string]Algorithm] // read on every call: an immutable snapshot
)

// ForceEnv is the environment variable ForceFromEnv reads:
// "allreduce=ring,bcast=binomial".
const ForceEnv = "RIVET_COLL_ALGORITHMS"

// ForceFromEnv applies the overrides named in the environment variable
// ForceEnv, as Force would, and returns the first that is not valid
// (applying the others). The package reads no environment by itself:
// a program that wants the variable honoured calls this (rivet bench
// does). Every process must force the same algorithms.
func ForceFromEnv() error {
	v := os.Getenv(ForceEnv)
	if v == "" {
		return nil
	}
	var first error
	for _, kv := range strings.Split(v, ",") {
		k, a, _ := strings.Cut(strings.TrimSpace(kv), "=")
		if err := Force(k, Algorithm(a)); err != nil && first == nil {
			first = fmt.Errorf("%s: %w", ForceEnv, err)
		}
	}
	return first
}

// Force makes collective coll ("allreduce", …) use algorithm a, or the
// table's choice again with Auto. Every process must force the same
// algorithms. When a forced algorithm cannot serve a call — ring with a
// non-commutative op, recursive doubling for allgather on a size that is
// not a power of two — the table's choice serves it instead.
func Force(coll string, a Algorithm) error {
	offered, ok := algorithms[coll]
	if !ok {
		return fmt.Errorf("collectives: no collective %q", coll)
	}
	if a != Auto && !contains(offered, a) {
		return fmt.Errorf("collectives: %s has no algorithm %q (it has %v)", coll, a, offered)
	}
	forceMu.Lock()
	defer forceMu.Unlock()
	m := map[string]Algorithm{}
	if old := forced.Load(); old != nil {
		maps.Copy(m, *old)
	}
	if a == Auto {
		delete(m, coll)
	} else {
		m[coll] = a
	}
	forced.Store(&m)
	return nil
}

func contains(as []Algorithm, a Algorithm) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

func forcedFor(coll string) Algorithm {
	if m := forced.Load(); m != nil {
		return (*m)[coll]
	}
	return Auto
}

func pow2(n int) bool { return n&(n-1) == 0 }

// The selection table, by message size in bytes (per process for the
// vector collectives) and communicator size. See docs/collectives.md.
const (
	shortMsg = 2048 // below: latency-bound algorithms
	longMsg  = 512 << 10
)

// allreduceByMessages is the table's allreduce where the shared-memory
// algorithms, which it prefers on one node, cannot serve: off the node, on
// other communicators, and nonblocking.
func allreduceByMessages(bytes int, commutative bool) Algorithm {
	if bytes >= 32<<10 && commutative {
		// From 32 KiB recursive doubling's whole-vector messages leave
		// shared memory's 16 KiB eager limit for rendezvous; the ring's
		// are halves or less.
		return Ring
	}
	return RecursiveDoubling
}

func choose(coll string, bytes, n int, commutative bool) Algorithm {
	a := forcedFor(coll)
	switch coll {
	case "barrier":
		if a == Auto {
			a = SharedFlags // falls back to dissemination where it cannot serve
		}
	case "bcast":
		if a == Auto {
			a = Binomial
			if bytes >= 12<<10 && n > 2 {
				a = ScatterAllgather
			}
		}
	case "allreduce":
		if a == Ring && !commutative {
			a = Auto
		}
		if a == Auto {
			switch {
			case bytes <= nodecoll.AllreduceMax && (bytes <= 1<<10 || bytes*n <= 16<<10):
				// Every process reads every slot, so above 1 KiB only
				// while the whole is small: up to 4 KiB on 4 ranks.
				a = SharedSlots
			case bytes >= 8<<10:
				// Staged chunks beat the messages from 8 KiB on 2 and 4
				// ranks (docs/performance.md).
				a = SharedChunks
			default:
				a = allreduceByMessages(bytes, commutative)
			}
		}
	case "gather", "scatter":
		if a == Auto {
			a = Binomial
		}
	case "allgather":
		if a == RecursiveDoubling && !pow2(n) {
			a = Auto
		}
		if a == Auto {
			switch {
			case bytes*n < 64<<10 && pow2(n):
				a = RecursiveDoubling
			case bytes*n < 64<<10:
				a = Bruck
			default:
				a = Ring
			}
		}
	case "alltoall":
		if a == Auto {
			a = Pairwise
			if bytes <= 256 && n >= 8 {
				a = Bruck
			}
		}
	case "reduce_scatter":
		if a == Ring && !commutative {
			a = Auto
		}
		if a == Auto {
			a = ReduceScatterv
			if commutative && bytes >= shortMsg {
				a = Ring
			}
		}
	default:
		if a == Auto {
			a = algorithms[coll][0]
		}
	}
	return a
}
