package ftsim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// Schedule is a family of failure schedules.
type Schedule uint8

// The families. Each draws its sizes, times and victims from the seed.
const (
	None     Schedule = iota // nobody fails
	Random                   // 1–3 kills at random moments of the agreement
	Phase                    // a kill as a process sends its contribution, its request or the decision
	Roots                    // every successive root dies as it sends the decision or asks for contributions
	Cascade                  // kills that follow each other while the last is being detected
	Together                 // k processes killed at the same moment
	NodeDown                 // a node's processes, all at once
	Slowed                   // processes not run for a while, within the detector's assumptions, beside a kill
	Split                    // a partition of the nodes, healed before any verdict, after some, or never
	nSchedules
)

var scheduleNames = [...]string{"none", "random", "phase", "roots", "cascade", "together", "node", "slowed", "split"}

func (s Schedule) String() string {
	if int(s) < len(scheduleNames) {
		return scheduleNames[s]
	}
	return fmt.Sprintf("Schedule(%d)", int(s))
}

// Schedules lists every family.
func Schedules() []Schedule {
	out := make([]Schedule, nSchedules)
	for i := range out {
		out[i] = Schedule(i)
	}
	return out
}

// Draw makes the scenario of schedule family sch for seed: protocol p
// (Agree, Revoke or Shrink) at n processes (ppn a node) under model m,
// with random descheduling (m.Stall) on. An agreement's or a shrink's
// processes enter within 20 µs of each other; a revoke comes up to
// 200 µs in, after some of the faults.
func Draw(p Protocol, sch Schedule, seed uint64, n, ppn int, m Model) Scenario {
	rng := rand.New(rand.NewPCG(seed, uint64(sch)+0xfa17))
	m.PPN = ppn
	m.Stall, m.StallMax = 0.002, 5*time.Millisecond
	sc := Scenario{Protocol: p, N: n, Model: m, Skew: Time(rng.Int64N(int64(20 * time.Microsecond))), Busy: 32}
	if p == Revoke {
		sc.Skew *= 10
	}
	if n < 2 {
		return sc
	}
	// during: a moment while the agreement runs (it takes microseconds
	// to milliseconds); or just before it.
	during := func() Time { return Time(rng.Int64N(int64(20*time.Microsecond + 200*time.Microsecond))) }
	victim := func() int {
		if rng.IntN(4) == 0 {
			return rng.IntN(min(n, 1+ulfm.Arity)) // the root or its children, often
		}
		return rng.IntN(n)
	}
	kill := func(r int, at Time) { sc.Faults = append(sc.Faults, Fault{Rank: r, Kind: Kill, At: at}) }
	// used: at most n-1 distinct victims.
	used := map[int]bool{}
	pick := func() (int, bool) {
		if len(used) >= n-1 {
			return 0, false
		}
		for {
			if r := victim(); !used[r] {
				used[r] = true
				return r, true
			}
		}
	}
	to := m.Detector.Timeout
	switch sch {
	case Random:
		for k := 1 + rng.IntN(3); k > 0; k-- {
			if r, ok := pick(); ok {
				kill(r, during())
			}
		}
	case Phase:
		if r, ok := pick(); ok {
			tag := []int{ulfm.TagUp, ulfm.TagDown, ulfm.TagReq}[rng.IntN(3)]
			sc.Faults = append(sc.Faults, Fault{Rank: r, Kind: Kill, Tag: tag, After: rng.IntN(ulfm.Arity)})
		}
	case Roots:
		for r := 0; r < min(n-1, 1+rng.IntN(4)); r++ {
			tag := ulfm.TagDown
			if r > 0 && rng.IntN(2) == 0 {
				tag = ulfm.TagReq
			}
			used[r] = true
			sc.Faults = append(sc.Faults, Fault{Rank: r, Kind: Kill, Tag: tag, After: rng.IntN(3)})
		}
	case Cascade:
		at := during()
		for k := 2 + rng.IntN(4); k > 0; k-- {
			if r, ok := pick(); ok {
				kill(r, at)
				at += Time(rng.Int64N(int64(to)))
			}
		}
	case Together:
		at := during()
		for k := 2 + rng.IntN(min(n-1, 16)); k > 0; k-- {
			if r, ok := pick(); ok {
				kill(r, at)
			}
		}
	case NodeDown:
		if ppn < n {
			node := rng.IntN((n + ppn - 1) / ppn)
			sc.Faults = append(sc.Faults, Fault{Rank: node * ppn, Kind: Node, At: during()})
		}
	case Slowed:
		for k := 1 + rng.IntN(3); k > 0; k-- {
			if r, ok := pick(); ok {
				// Within the detector's assumptions: not run for less than
				// Unconfirmed (a process on another node that answers
				// reads but does not beat for that long is convicted).
				long := Time(rng.Int64N(int64(m.Detector.Unconfirmed * 8 / 10)))
				sc.Faults = append(sc.Faults, Fault{Rank: r, Kind: Slow, At: during(), For: long})
			}
		}
		if r, ok := pick(); ok && rng.IntN(2) == 0 {
			kill(r, during())
		}
	case Split:
		// Up to 512 processes: each side convicts the other's processes
		// one detector timeout after another, so a partition of
		// thousands simulates minutes, for no new case.
		if nodes := (n + ppn - 1) / ppn; nodes > 1 && n <= 512 {
			k := 1 + rng.IntN(nodes-1)
			lo := rng.IntN(nodes - k + 1)
			long := []Time{to / 2, 2 * to, time.Hour}[rng.IntN(3)]
			sc.Faults = append(sc.Faults, Fault{Rank: lo * ppn, Kind: Partition, Nodes: k, At: during(), For: long})
		}
	}
	return sc
}
