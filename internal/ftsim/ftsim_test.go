package ftsim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// seeds is how many schedules TestSchedules plays: def, or $FTSIM_SEEDS
// (lab/ftsim.sh runs 100,000 and more).
func seeds(t *testing.T, def int) int {
	if s := os.Getenv("FTSIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			t.Fatalf("FTSIM_SEEDS=%q: not a count", s)
		}
		return n
	}
	if testing.Short() {
		return def / 10
	}
	return def
}

// draw is schedule number i of TestSchedules: its protocol, family,
// size and node size, all from i. Most are small (an agreement's corner
// cases live there); one in 50 is 1024 processes, one in 1000 4096.
func draw(i uint64) Scenario {
	rng := rand.New(rand.NewPCG(i, 1))
	n := []int{2, 3, 5, 8, 9, 16, 33, 64, 100, 257}[rng.IntN(10)]
	switch {
	case i%1000 == 999:
		n = 4096
	case i%50 == 49:
		n = 1024
	}
	ppn := []int{1, 4, 8, 32}[rng.IntN(4)]
	p := []Protocol{Agree, Agree, Revoke, Shrink, NodeAgree}[rng.IntN(5)]
	if p == NodeAgree {
		n = min(n, 64) // one node's processes
		ppn = n
	}
	return Draw(p, Schedule(i%uint64(nSchedules)), i, n, ppn, Cluster())
}

// TestSchedules plays thousands of failure schedules — every family, at
// sizes from 2 to 4096 processes, nodes of 1 to 32 — and checks every
// promise in each (Result.Violations): the survivors' agreements decide
// alike, within a bound once the failures are known; every survivor
// learns every failure and no live process is ever declared failed; a
// revoke reaches every survivor; a shrink ends everywhere with the same
// group, ids and generation; a node agreement ends alike everywhere —
// through shared memory with every member's words, or over messages. A failure prints the seed; TestReplay
// shows a seed replays exactly.
func TestSchedules(t *testing.T) {
	n := seeds(t, 3000)
	start := time.Now()
	bad := 0
	for i := range uint64(n) {
		sc := draw(i)
		if err := Run(sc, i).Err(sc); err != nil {
			if bad++; bad <= 10 {
				t.Errorf("schedule %d: %v", i, err)
			}
		}
	}
	t.Logf("%d schedules, %d with violations, in %v", n, bad, time.Since(start).Round(time.Millisecond))
}

// TestRegressions replays the seeds that found bugs, fixed since.
func TestRegressions(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   Scenario
		seed uint64
	}{
		// 11 of 16 processes killed at once: survivors whose ±1 notice
		// neighbours were dead, not yet known, when they spread a
		// failure left other survivors never hearing of it
		// (ulfm.Notices now sends what it knows to a new ±1 neighbour).
		{"notices past dead neighbours", Draw(Agree, Together, 557, 16, 8, Cluster()), 557},
		{"notices past dead neighbours, 8 processes", Draw(Agree, Together, 853, 8, 32, Cluster()), 853},
		// The same for a revoke that comes after 6 of 8 died, before
		// anyone knew (ulfm.Notices.Recheck).
		{"revoke past dead neighbours", Draw(Revoke, Together, 1085, 8, 1, Cluster()), 1085},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Run(tc.sc, tc.seed).Err(tc.sc); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReplay: a seed replays exactly — the same measures and the same
// verdicts — and another seed plays another run.
func TestReplay(t *testing.T) {
	sc := Draw(Agree, Cascade, 42, 100, 8, Cluster())
	a, b := Run(sc, 42), Run(sc, 42)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 played twice: %+v, then %+v", a, b)
	}
	if c := Run(sc, 43); c.Done == a.Done && c.Detected == a.Detected {
		t.Fatalf("seeds 42 and 43 played the same run: %+v", a)
	}
}

// TestCheckerCatches: the checks fail a run that breaks a promise. A
// process on another node not run for longer than the detector's
// Unconfirmed is outside its assumptions: it is convicted, live, and
// the run says so. So is a partition without the quorum rule, and a
// node down with nobody asking it whether it is there.
func TestCheckerCatches(t *testing.T) {
	// holds runs sc and fails unless it keeps every promise; breaks, unless
	// it breaks one.
	holds := func(sc Scenario) {
		t.Helper()
		if err := Run(sc, 1).Err(sc); err != nil {
			t.Fatal(err)
		}
	}
	breaks := func(sc Scenario, what string) {
		t.Helper()
		r := Run(sc, 1)
		if len(r.Violations) == 0 {
			t.Fatalf("%s, and no promise was broken: %+v", what, r)
		}
		t.Logf("as it should: %v", r.Err(sc))
	}
	m := Cluster()
	m.PPN = 1
	sc := Scenario{Protocol: Agree, N: 8, Model: m, Faults: []Fault{{Rank: 3, Kind: Slow, At: 0, For: 2 * m.Detector.Unconfirmed}}}
	breaks(sc, fmt.Sprintf("a process not run for %v, twice Unconfirmed", 2*m.Detector.Unconfirmed))
	// Within the assumptions, the same process is never convicted.
	sc.Faults[0].For = m.Detector.Unconfirmed / 2
	holds(sc)
	// A partition that never heals, 3 nodes of 8 cut off: with the
	// quorum rule the 3 end themselves; without it both sides go on, each
	// holding the other failed — two jobs — and the run says so.
	m.PPN = 2
	cut := Scenario{Protocol: Agree, N: 16, Model: m, Faults: []Fault{{Rank: 4, Kind: Partition, Nodes: 3, At: 0, For: time.Hour}}}
	holds(cut)
	cut.NoQuorum = true
	breaks(cut, "a partition without the quorum rule")
	// A node of 4 down while an agreement runs: without asking the node,
	// its processes the observer across had not connected to are never
	// read, never refused and never convicted, and the agreement waits
	// for them — the gap the node's question closes.
	m.PPN = 4
	down := Scenario{Protocol: Agree, N: 16, Model: m, Faults: []Fault{{Rank: 5, Kind: Node}}}
	holds(down)
	down.NoNodeProbe = true
	breaks(down, "a node down with nobody asking it")
}

// TestReference: the reference collectives finish everywhere in the
// messages their algorithms send — a barrier ⌈log2 n⌉ a process, an
// allreduce log2 of the largest power of two below n, plus the fold's —
// and the allreduce computes the AND of every contribution.
func TestReference(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 13, 64, 100} {
		m := Cluster()
		m.PPN = 4
		for _, p := range []Protocol{Barrier, Allreduce} {
			sc := Scenario{Protocol: p, N: n, Model: m}
			r := Run(sc, 7)
			if err := r.Err(sc); err != nil {
				t.Fatal(err)
			}
			L, rounds := 0, 0
			for 1<<(L+1) <= n {
				L++
			}
			for 1<<rounds < n {
				rounds++
			}
			want := float64(rounds)
			if p == Allreduce {
				rem := n - 1<<L
				want = float64((1<<L)*L+2*rem) / float64(n)
			}
			if r.Msgs != want {
				t.Errorf("%v: %.3f messages a process, want %.3f", sc, r.Msgs, want)
			}
			if n > 1 && r.Done <= 0 {
				t.Errorf("%v: took no time", sc)
			}
		}
	}
}

// TestAgreeMessages: without failures an agreement sends 2(n-1)
// messages in all — one up and one down each tree edge — at every size.
func TestAgreeMessages(t *testing.T) {
	for _, n := range []int{2, 9, 73, 1000} {
		sc := Scenario{Protocol: Agree, N: n, Model: Cluster()}
		r := Run(sc, 3)
		if err := r.Err(sc); err != nil {
			t.Fatal(err)
		}
		if want := 2 * float64(n-1) / float64(n); r.Msgs != want {
			t.Errorf("n=%d: %.4f messages a process, want %.4f", n, r.Msgs, want)
		}
	}
}
