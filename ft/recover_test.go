//go:build linux

package ft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/ulfm"
	"github.com/rivet-hpc/rivet/op"
)

func init() {
	progs.Add("agree", progAgree)
	progs.Add("shrink", progShrink)
}

// The failure matrix of agreement and shrink. FT_VICTIMS names the world
// ranks that die; FT_POINT when:
//
//	before     before they enter the agreement
//	published  once they have contributed, before the decision: they
//	           call Agree with a ctx that has ended
//	afterup    once their contribution has gone to their parent
//	decided    once they hold the decision and have passed it on
//	before   (shrink) right before they call Shrink (which agrees on
//	         the whole context-id mask in this case: see progShrink)
//	during   (shrink) in its agreement (on the failed group and the
//	         context id at once), contributed
//
// RIVET_FT_AGREE=messages keeps the agreement off shared memory, so that
// on a node too the points of the agreement over messages (afterup,
// decided, during) are the ones tested.
const (
	victimsEnv = "FT_VICTIMS"
	pointEnv   = "FT_POINT"
	msgsEnv    = AgreeEnv
)

func victimsOf() []int {
	var v []int
	for _, f := range strings.Split(os.Getenv(victimsEnv), ",") {
		if r, err := strconv.Atoi(f); err == nil {
			v = append(v, r)
		}
	}
	return v
}

func die() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// dieAt makes this process die in the first agreement that matches
// (by its sequence number and its value's words) once it has
// contributed: the second time it is seen waiting for the decision —
// the hook runs after each round of progress, so its contribution has
// left — or once it holds the decision. The root contributes to nobody:
// it dies while it gathers.
func dieAt(match func(seq uint64, words int) bool, root bool) {
	seen := 0
	testHookWait = func(seq uint64, st ulfm.State, words int) {
		if !match(seq, words) {
			return
		}
		wait := ulfm.Broadcasting
		if root {
			wait = ulfm.Gathering
		}
		if st == ulfm.Decided {
			die()
		}
		if st == wait {
			if seen++; seen == 2 {
				die()
			}
		}
	}
}

func seqIs(n uint64) func(uint64, int) bool {
	return func(seq uint64, _ int) bool { return seq == n }
}

// errClass names an error's class for comparison across ranks.
func errClass(err error) string {
	switch {
	case err == nil:
		return "success"
	case errors.Is(err, fabric.ErrProcFailed):
		return "proc-failed"
	case errors.Is(err, fabric.ErrRevoked):
		return "revoked"
	}
	return "other(" + err.Error() + ")"
}

// settle acknowledges every known failure and agrees until an agreement
// succeeds: then every member knows and acknowledged the same failures.
func settle(ctx context.Context, c *fabric.Comm) {
	for i := 0; ; i++ {
		c.AckAllFailed()
		if _, err := Agree(ctx, c, 1); err == nil {
			return
		} else if !errors.Is(err, fabric.ErrProcFailed) || i > 20 {
			failf("settling: agreement %d: %v", i, err)
		}
	}
}

// progAgree: a clean agreement; then one the victims die in; then the
// survivors settle and shrink, and work on the result. Each survivor
// prints what its agreement decided and what it shrank to.
func progAgree(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	defer startDetector(ctx, ep)()
	victims, point := victimsOf(), os.Getenv(pointEnv)
	all := ^uint64(0) &^ (1<<n - 1)
	v, err := Agree(ctx, w, int(^uint64(0)&^(1<<me)))
	must(err, "clean agreement")
	if uint64(v) != all {
		failf("clean agreement decided %x, want %x", uint64(v), all)
	}
	victim := slices.Contains(victims, me)
	if victim {
		switch point {
		case "before":
			die()
		case "published":
			ended, cancel := context.WithCancel(ctx)
			cancel()
			_, err := Agree(ended, w, int(^uint64(0)&^(1<<me)))
			if !errors.Is(err, context.Canceled) {
				failf("an agreement with a ctx that had ended: %v", err)
			}
			die()
		case "afterup":
			dieAt(seqIs(2), me == 0)
		}
	}
	t0 := time.Now()
	v, err = Agree(ctx, w, int(^uint64(0)&^(1<<me)))
	took := time.Since(t0)
	if victim {
		if point == "decided" {
			// Pass the decision on (the messages leave with progress).
			w.WaitFT(ctx, func() bool { return time.Since(t0) > 20*time.Millisecond })
			die()
		}
		failf("victim %d did not die in its agreement (point %s): %x %v", me, point, uint64(v), err)
	}
	if took > 10*time.Second {
		failf("the agreement took %v", took)
	}
	if err != nil && !errors.Is(err, fabric.ErrProcFailed) {
		failf("agreement: %v", err)
	}
	if err != nil {
		// Every process that did not contribute is known failed now.
		for _, r := range victims {
			bit := uint64(1) << r
			if uint64(v)&bit != 0 && !slices.Contains(w.GetFailed().Members(), r) {
				failf("world rank %d did not contribute (%x) and is not in GetFailed %v", r, uint64(v), w.GetFailed().Members())
			}
		}
	}
	fmt.Printf("agreed %x %s\n", uint64(v), errClass(err))
	settle(ctx, w)
	shrunk(ctx, w, n-len(victims))
	return nil
}

// shrunk shrinks c, checks the result has want members, prints them, and
// works on it.
func shrunk(ctx context.Context, c *fabric.Comm, want int) *fabric.Comm {
	s, err := Shrink(ctx, c)
	must(err, "shrink")
	if s.Size() != want {
		failf("shrank to %d members %v, want %d", s.Size(), s.Group().Members(), want)
	}
	fmt.Printf("shrunk %v\n", s.Group().Members())
	// A collective on it: its context id is the same everywhere, or this
	// would never match.
	x := []int64{0}
	must(collectives.Allreduce(ctx, s, []int64{1}, x, op.Sum[int64]()), "allreduce on the shrunk communicator")
	if x[0] != int64(want) {
		failf("allreduce on the shrunk communicator: %d, want %d", x[0], want)
	}
	return s
}

// progShrink: one member (the last) fails; the others revoke and
// shrink, and the victims die right before the shrink or in its
// agreement (which settles the failed group and the context id at
// once). The survivors' shrink still gives one communicator; a victim
// that died after contributing may be in it, known failed there, and a
// second shrink removes it.
func progShrink(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	defer startDetector(ctx, ep)()
	victims, point := victimsOf(), os.Getenv(pointEnv)
	// (Another rank's revoke may end this barrier: legitimately.)
	if err := collectives.Barrier(ctx, w); err != nil && !errors.Is(err, fabric.ErrRevoked) {
		failf("barrier: %v", err)
	}
	if me == n-1 {
		die()
	}
	victim := slices.Contains(victims, me)
	if point == "before" {
		// Agree on the whole context-id mask, as when no id among the
		// first is free everywhere.
		idWindow = 0
	}
	w.Revoke() // shrink works on a revoked communicator
	if victim {
		switch point {
		case "before":
			die()
		case "during":
			// The shrink's first agreement is the first on w.
			dieAt(seqIs(1), me == 0)
		}
	}
	s, err := Shrink(ctx, w)
	if victim {
		failf("victim %d did not die in the shrink (point %s): %v", me, point, err)
	}
	must(err, "shrink")
	got := s.Group().Members()
	fmt.Printf("first-shrink %v\n", got)
	if point == "before" && len(got) != n-1-len(victims) {
		failf("shrank to %v, want %d members", got, n-1-len(victims))
	}
	settle(ctx, s)
	shrunk(ctx, s, n-1-len(victims))
	return nil
}

var agreedRE = regexp.MustCompile(`\] (agreed|first-shrink|shrunk|survived) (.*)`)

// sameEverywhere checks every survivor printed the same lines of each
// kind, and that there are as many as survivors.
func sameEverywhere(t *testing.T, out string, survivors int) {
	t.Helper()
	got := map[string]map[string]int{}
	for _, m := range agreedRE.FindAllStringSubmatch(out, -1) {
		if got[m[1]] == nil {
			got[m[1]] = map[string]int{}
		}
		got[m[1]][m[2]]++
	}
	for kind, vals := range got {
		if len(vals) != 1 {
			t.Fatalf("survivors disagree on what they %s: %v\n%s", kind, vals, out)
		}
		for v, k := range vals {
			if k != survivors {
				t.Fatalf("%d of %d survivors printed what they %s\n%s", k, survivors, kind, out)
			}
			t.Logf("every survivor %s %s", kind, v)
		}
	}
	if len(got) == 0 {
		t.Fatalf("no survivor printed anything\n%s", out)
	}
}

type recoverCase struct {
	prog, point string
	victims     func(n int) []int
	msgsOnly    bool // RIVET_FT_AGREE=messages
}

func (c recoverCase) name(n int) string {
	return fmt.Sprintf("%s/%s/%v/%d", c.prog, c.point, c.victims(n), n)
}

func one(r int) func(int) []int { return func(int) []int { return []int{r} } }
func leaf(n int) []int          { return []int{n - 2} }

var recoverCases = []recoverCase{
	{"agree", "before", one(0), false},                                 // the root, before contributing
	{"agree", "before", one(1), false},                                 // an interior node
	{"agree", "before", leaf, false},                                   // a leaf
	{"agree", "before", func(int) []int { return []int{1, 2} }, false}, // two at once
	{"agree", "published", one(0), false},
	{"agree", "published", leaf, false},
	{"agree", "published", func(int) []int { return []int{1, 2} }, false},
	{"agree", "afterup", one(1), true}, // an interior node, after contributing
	{"agree", "afterup", leaf, true},
	{"agree", "afterup", func(int) []int { return []int{1, 2} }, true},
	{"agree", "decided", one(0), true}, // the root, after deciding
	{"agree", "decided", one(1), true},
	{"agree", "decided", func(int) []int { return []int{0, 1} }, true},
	{"shrink", "before", one(1), false},
	{"shrink", "before", func(int) []int { return []int{0, 2} }, false},
	{"shrink", "during", one(1), true},
	{"shrink", "during", func(int) []int { return []int{0, 2} }, true},
}

// TestRecoverMatrix: agreement and shrink with victims killed at each
// step of their protocols, 1 and 2 at once, on 4 and 8 ranks. Every
// survivor returns (within the job's bound), decides the same value with
// the same error class, and shrinks to the same communicator.
func TestRecoverMatrix(t *testing.T) {
	for _, way := range ways(t) {
		for _, n := range []int{4, 8} {
			for _, c := range recoverCases {
				t.Run(way.name+"/"+c.name(n), func(t *testing.T) {
					victims := c.victims(n)
					env := append(slices.Clone(way.env), fmt.Sprintf("%s=%s", pointEnv, c.point),
						victimsEnv+"="+strings.Trim(strings.Join(strings.Fields(fmt.Sprint(victims)), ","), "[]"))
					if c.msgsOnly {
						env = append(env, msgsEnv+"=messages")
					}
					out, errs, _ := progs.Run(t, n, c.prog, true, env...)
					dead := len(victims)
					if c.prog == "shrink" {
						dead++
					}
					for r := 0; r < n; r++ {
						if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) != (slices.Contains(victims, r) || c.prog == "shrink" && r == n-1) {
							t.Fatalf("rank %d: finished %v, a victim %v\n%s\n%s", r, !slices.Contains(victims, r), slices.Contains(victims, r), out, errs)
						}
					}
					if strings.Contains(out+errs, "did not die") {
						t.Fatalf("a victim did not die where it should have\n%s\n%s", out, errs)
					}
					sameEverywhere(t, out, n-dead)
				})
			}
		}
	}
}

func init() { progs.Add("cycles", progCycles) }

// cycleVictims are the world ranks that die, one per cycle of
// progCycles: the root of the agreement tree among them.
var cycleVictims = []int{7, 1, 4, 0, 5}

// progCycles: 8 ranks, 5 successive failures. In each cycle the ranks
// work (allreduces) on the current communicator until the cycle's victim
// dies; then each survivor revokes it, agrees until every failure is
// acknowledged, shrinks, and goes on with the result. Then the 3
// survivors finalize.
func progCycles(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me := w.Rank()
	defer startDetector(ctx, ep)()
	c := w
	for k, v := range cycleVictims {
		for i := 0; ; i++ {
			if me == v && i == 3 {
				die()
			}
			x := []int64{0}
			err := collectives.Allreduce(ctx, c, []int64{1}, x, op.Sum[int64]())
			if err == nil {
				if i > 10000 {
					failf("cycle %d: no failure after %d allreduces", k, i)
				}
				continue
			}
			if !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
				failf("cycle %d: allreduce: %v", k, err)
			}
			break
		}
		c.Revoke()
		settle(ctx, c)
		s, err := Shrink(ctx, c)
		must(err, fmt.Sprintf("cycle %d: shrink", k))
		if want := 8 - k - 1; s.Size() != want {
			failf("cycle %d: shrank to %v, want %d members", k, s.Group().Members(), want)
		}
		if c != w {
			must(c.Free(), "free")
		}
		c = s
	}
	x := []int64{0}
	must(collectives.Allreduce(ctx, c, []int64{int64(me)}, x, op.Sum[int64]()), "allreduce of the survivors")
	if x[0] != 2+3+6 {
		failf("survivors' allreduce: %d, want %d", x[0], 2+3+6)
	}
	fmt.Printf("survived %v\n", c.Group().Members())
	return c.Free()
}

// TestCycles: 8 ranks, 5 successive failures, each followed by revoke,
// agree and shrink, and work on the result; the survivors finalize
// cleanly. (lab/ft-cycles.sh runs it 100 times and counts hangs.)
func TestCycles(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			out, errs, _ := progs.Run(t, 8, "cycles", true, way.env...)
			for r := 0; r < 8; r++ {
				if survivor := !slices.Contains(cycleVictims, r); strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) != survivor {
					t.Fatalf("rank %d: survivor %v, but finished %v\n%s\n%s", r, survivor, !survivor, out, errs)
				}
			}
			sameEverywhere(t, out, 3)
		})
	}
}
