package ulfm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
)

// The agreement protocol in a simulated job: processes that enter at
// random moments, messages delivered in a random interleaving (in order
// between any two processes, as the channel keeps them), processes that
// crash at random moments — before, while and after contributing, as the
// root or an interior node — and survivors that learn of each failure at
// a random later moment. Every run checks what the agreement promises.

type simMsg struct {
	src, dst, tag int
	payload       []byte
}

type simProc struct {
	e       *Era
	crashed bool
	knows   []bool             // learned of rank r's failure
	seqs    []uint64           // by round: the agreement reserved for it
	entered []bool             // by round
	open    map[int]*Agreement // by round: entered, not decided
	ndone   int                // rounds decided
	results []simResult        // by round
}

type simResult struct {
	val    uint64
	failed bool
	dead   rankSet
}

type sim struct {
	rng    *rand.Rand
	n      int
	procs  []*simProc
	queues map[[2]int][]simMsg // by (src, dst), in order
	vals   [][]uint64          // by round, by rank
	acked  [][]int             // by rank: acknowledged failures (same every round)
	early  []bool              // failed before the first agreement
	msgs   int
	// Out of order: every process reserves every round's agreement
	// first (as nonblocking collectives do when they start) and enters
	// them in a random order, several at a time (as they complete).
	ooo bool
}

func newSim(seed uint64, n, k, rounds int) *sim {
	return newSimOrder(seed, n, k, rounds, false)
}

func newSimOrder(seed uint64, n, k, rounds int, ooo bool) *sim {
	s := &sim{rng: rand.New(rand.NewPCG(seed, 7)), n: n, queues: map[[2]int][]simMsg{}, ooo: ooo}
	for k := 0; k < rounds; k++ {
		v := make([]uint64, n)
		for i := range v {
			v[i] = ^uint64(0) &^ (1 << s.rng.IntN(16)) // one bit cleared
		}
		s.vals = append(s.vals, v)
	}
	s.early = make([]bool, n)
	s.acked = make([][]int, n)
	for i := 0; i < n; i++ {
		p := &simProc{knows: make([]bool, n), entered: make([]bool, rounds), open: map[int]*Agreement{}, results: make([]simResult, rounds)}
		src := i
		p.e = NewEra(n, i, k, func(dst, tag int, b []byte) error {
			if p.crashed {
				return nil
			}
			k := [2]int{src, dst}
			s.queues[k] = append(s.queues[k], simMsg{src, dst, tag, slices.Clone(b)})
			s.msgs++
			return nil
		})
		for range rounds {
			p.seqs = append(p.seqs, p.e.Reserve())
		}
		s.procs = append(s.procs, p)
	}
	return s
}

// run plays the job until no event is left; it reports a hang if the
// survivors have not all finished within a bound of steps.
func (s *sim) run(t *testing.T, crashes map[int]int) {
	t.Helper()
	// crashes: rank → the step at which it crashes (0: before anything).
	for r, at := range crashes {
		if at == 0 {
			s.procs[r].crashed = true
			s.early[r] = true
		}
	}
	for step := 1; ; step++ {
		if step > 200000 {
			t.Fatalf("no end after %d steps: %s", step, s.state())
		}
		for r, at := range crashes {
			if at == step {
				s.procs[r].crashed = true
			}
		}
		var evs []func()
		for i, p := range s.procs {
			if p.crashed {
				continue
			}
			for r := range s.vals {
				if !p.entered[r] {
					evs = append(evs, func() { s.enter(i, r) })
				}
				if !s.ooo && (!p.entered[r] || len(p.open) > 0) {
					break // one at a time, in order
				}
			}
			for r := 0; r < s.n; r++ {
				if s.procs[r].crashed && !p.knows[r] {
					evs = append(evs, func() {
						p.knows[r] = true
						p.e.Fail(r)
						s.collect(i)
					})
				}
			}
		}
		for k, q := range s.queues {
			if len(q) > 0 {
				evs = append(evs, func() { s.deliver(k) })
			}
		}
		if len(evs) == 0 {
			for i, p := range s.procs {
				if !p.crashed && p.ndone < len(s.vals) {
					t.Fatalf("rank %d stuck with %d of %d agreements decided, with nothing left to happen: %s", i, p.ndone, len(s.vals), s.state())
				}
			}
			return
		}
		evs[s.rng.IntN(len(evs))]()
	}
}

func (s *sim) enter(i, r int) {
	p := s.procs[i]
	p.entered[r] = true
	ops := []Op{And}
	p.open[r] = p.e.EnterAt(p.seqs[r], []uint64{s.vals[r][i]}, ops, s.acked[i])
	s.collect(i)
}

// collect records decided agreements.
func (s *sim) collect(i int) {
	p := s.procs[i]
	for r, a := range p.open {
		if a.state == Decided {
			p.results[r] = simResult{a.val[0], a.raised, a.dead}
			delete(p.open, r)
			p.ndone++
		}
	}
}

func (s *sim) deliver(k [2]int) {
	q := s.queues[k]
	m := q[0]
	s.queues[k] = q[1:]
	d := s.procs[m.dst]
	if d.crashed {
		return
	}
	d.e.Message(m.src, m.tag, m.payload)
	s.collect(m.dst)
}

func (s *sim) state() string {
	var b []byte
	for i, p := range s.procs {
		open := map[int]State{}
		for r, a := range p.open {
			open[r] = a.state
		}
		b = fmt.Appendf(b, "\n  %d: crashed %v decided %d open (round: state) %v knows %v parent %d", i, p.crashed, p.ndone, open, p.knows, p.e.Parent(i))
	}
	return string(b)
}

// check verifies every agreement's outcome at the survivors.
func (s *sim) check(t *testing.T, what string) {
	t.Helper()
	var live []int
	for i, p := range s.procs {
		if !p.crashed {
			live = append(live, i)
		}
	}
	for k := range s.vals {
		ref := s.procs[live[0]].results[k]
		for _, i := range live {
			got := s.procs[i].results[k]
			if got.val != ref.val || got.failed != ref.failed {
				t.Fatalf("%s, agreement %d: rank %d decided %x (failed %v), rank %d %x (failed %v)", what, k, live[0], ref.val, ref.failed, i, got.val, got.failed)
			}
			// The union of failures marks no survivor failed.
			for _, j := range live {
				if got.dead.has(j) {
					t.Fatalf("%s, agreement %d: rank %d holds survivor %d failed", what, k, i, j)
				}
			}
		}
		// Every survivor's value is in; the others' may be.
		want := ^uint64(0)
		for _, i := range live {
			want &= s.vals[k][i]
		}
		if ref.val&want != ref.val {
			t.Fatalf("%s, agreement %d: decided %x lacks a survivor's contribution (AND of survivors %x)", what, k, ref.val, want)
		}
		extra := ref.val ^ want // bits cleared by processes that failed
		for b := extra; b != 0; b &= b - 1 {
			bit := b & -b
			found := false
			for i, p := range s.procs {
				if p.crashed && !s.early[i] && s.vals[k][i]&bit == 0 {
					found = true
				}
			}
			if want&bit != 0 && !found {
				t.Fatalf("%s, agreement %d: decided %x clears a bit no contributor cleared", what, k, ref.val)
			}
		}
		if k == 0 {
			// A process failed before it could contribute, and not every
			// survivor acknowledged it: the agreement raises.
			for i := range s.procs {
				if !s.early[i] {
					continue
				}
				all := true
				for _, j := range live {
					all = all && slices.Contains(s.acked[j], i)
				}
				if !all && !ref.failed {
					t.Fatalf("%s: rank %d failed before contributing, not every survivor acknowledged it, and the agreement did not raise", what, i)
				}
				if ref.failed && !ref.dead.has(i) {
					t.Fatalf("%s: the agreement raised, and its failed set lacks rank %d, which did not contribute", what, i)
				}
			}
		}
	}
	// What is kept for late requests is forgotten in time. (Entered out
	// of order, an agreement may carry an older bound.)
	keep := 2
	if s.ooo {
		keep = len(s.vals)
	}
	for _, i := range live {
		if n := s.procs[i].e.Held(); n > keep {
			t.Fatalf("%s: rank %d still holds %d agreements", what, i, n)
		}
	}
}

// TestEraNoFailure: one value everywhere, no error, in 2(n-1) messages
// per agreement.
func TestEraNoFailure(t *testing.T) {
	for _, k := range []int{2, 3, Arity} {
		for _, n := range []int{1, 2, 3, 4, 7, 8, 9, 16, 33, 100} {
			for seed := uint64(0); seed < 20; seed++ {
				s := newSim(seed, n, k, 3)
				s.run(t, nil)
				what := fmt.Sprintf("k=%d n=%d seed=%d", k, n, seed)
				s.check(t, what)
				for k := range s.vals {
					if s.procs[0].results[k].failed {
						t.Fatalf("%s: raised without a failure", what)
					}
				}
				if want := 3 * 2 * (n - 1); s.msgs != want {
					t.Fatalf("%s: %d messages, want %d", what, s.msgs, want)
				}
			}
		}
	}
}

// TestEraAcknowledged: a failure every survivor acknowledged before the
// agreement does not raise; one that some did not does, everywhere.
func TestEraAcknowledged(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		for _, all := range []bool{true, false} {
			s := newSim(seed, 8, int(seed%2)*(Arity-2)+2, 2)
			for i := range s.acked {
				if all || i != 5 {
					s.acked[i] = []int{3}
				}
			}
			for _, p := range s.procs {
				p.knows[3] = true
				p.e.Fail(3)
			}
			s.run(t, map[int]int{3: 0})
			what := fmt.Sprintf("seed %d, all acknowledged %v", seed, all)
			s.check(t, what)
			if got := s.procs[0].results[0].failed; got == all {
				t.Fatalf("%s: raised %v", what, got)
			}
		}
	}
}

// eraRuns is how many simulated jobs a randomized test runs: def, a
// tenth of it with -short, or $ERA_RUNS.
func eraRuns(def int) int {
	if s := os.Getenv("ERA_RUNS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	if testing.Short() {
		return def / 10
	}
	return def
}

// TestEraFailures: 1 to 3 processes crash at random steps of two or three
// agreements (the root, interior nodes and leaves alike), in 4 to 16
// process jobs, thousands of interleavings.
func TestEraFailures(t *testing.T) {
	for run := range eraRuns(3000) {
		seed := uint64(run)
		rng := rand.New(rand.NewPCG(seed, 11))
		n := []int{4, 5, 8, 9, 16, 20}[rng.IntN(6)]
		k := []int{2, 3, Arity}[rng.IntN(3)]
		s := newSim(seed, n, k, 2+rng.IntN(2))
		crashes := map[int]int{}
		for f := 1 + rng.IntN(3); f > 0; f-- {
			r := rng.IntN(n)
			if rng.IntN(4) == 0 {
				r = 0 // the root, often
			}
			crashes[r] = rng.IntN(20 * n)
		}
		if len(crashes) == n {
			continue
		}
		s.run(t, crashes)
		s.check(t, fmt.Sprintf("run %d: n=%d k=%d crashes %v", run, n, k, crashes))
	}
}

// TestEraOutOfOrder: agreements reserved in one order and entered in
// random orders, several open at once — nonblocking collectives on a
// communicator with uniform errors, completed in another order at each
// process — with and without crashes.
func TestEraOutOfOrder(t *testing.T) {
	for run := range eraRuns(2000) {
		seed := uint64(run)
		rng := rand.New(rand.NewPCG(seed, 13))
		n := []int{2, 4, 5, 8, 9, 16, 20}[rng.IntN(7)]
		k := []int{2, 3, Arity}[rng.IntN(3)]
		rounds := 2 + rng.IntN(3)
		s := newSimOrder(seed, n, k, rounds, true)
		crashes := map[int]int{}
		for f := rng.IntN(4); f > 0; f-- {
			crashes[rng.IntN(n)] = rng.IntN(20 * n)
		}
		if len(crashes) == n {
			continue
		}
		s.run(t, crashes)
		what := fmt.Sprintf("run %d: n=%d k=%d rounds %d crashes %v", run, n, k, rounds, crashes)
		s.check(t, what)
		if len(crashes) == 0 {
			if want := rounds * 2 * (n - 1); s.msgs != want {
				t.Fatalf("%s: %d messages, want %d", what, s.msgs, want)
			}
		}
	}
}
