//go:build linux

package files

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

// The failure tests: four ranks write a finely interleaved pattern
// collectively through two aggregators (ranks 0 and 2), in 16 cycles per
// domain; the victim kills itself as its fourth cycle starts.
//
//   - The victim is aggregator 2: every survivor's data in its domain
//     (the file's second half) is undefined, and each survivor's call
//     raises an IOError matching ErrProcFailed that lists exactly those
//     ranges; every byte of the survivors' data in the first half is in
//     the file.
//   - The victim is rank 3, not an aggregator: only its own data is
//     lost. The aggregators raise (a member's data never came) with no
//     range of theirs undefined; rank 1, which exchanged only with the
//     live aggregators, succeeds; every survivor's data is in the file.
//
// Then Close raises, and releases every resource (the harness checks).
func TestAggregatorKilled(t *testing.T) { failJob(t, "2") }
func TestMemberKilled(t *testing.T)     { failJob(t, "3") }

func init() { progs.Add("kill", progKill) }

func failJob(t *testing.T, victim string) {
	v, _ := strconv.Atoi(victim)
	killJob(t, "kill", v, "FILES_VICTIM="+victim)
}

// killJob runs prog on four ranks, in a directory of its own, with env:
// the victim must die by SIGKILL and every other rank finish.
func killJob(t *testing.T, prog string, victim int, env ...string) {
	for name, penv := range providers(t) {
		t.Run(name, func(t *testing.T) {
			env := append(append(penv, "FILES_DIR="+t.TempDir()), env...)
			out, errs, st := progs.Run(t, 4, prog, true, env...)
			if st != 128+9 {
				t.Fatalf("status %d, want 137 (rank %d killed)\n%s\n%s", st, victim, out, errs)
			}
			for r := range 4 {
				if r != victim && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
				}
			}
		})
	}
}

const killCount = 4096 // elements of 8 bytes per rank: 128 KiB in all

func progKill(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me := c.Rank()
	victim, _ := strconv.Atoi(os.Getenv("FILES_VICTIM"))
	p := filepath.Join(dir(), "kill")
	f, err := Open(ctx, c, p, ModeCreate|ModeRdWr, Hints{Buffering: BufferingOn, Aggregators: 2, BufferSize: 4096})
	must(err, "open")
	ft, _ := BlockCyclic(1, 4, int64(me))
	must(f.SetView(ctx, 0, 8, ft), "view")
	data := make([]byte, 8*killCount)
	for i := range killCount {
		binary.LittleEndian.PutUint64(data[8*i:], value(me, i))
	}
	if me == victim {
		testHookCycle = func(c int) {
			if c == 3 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
	n, err := f.WriteAtAll(ctx, 0, data)
	var ioe *IOError
	errors.As(err, &ioe)
	var undef int64
	switch {
	case victim == 2:
		// Elements at bytes from 64 KiB on went to the dead aggregator.
		if ioe == nil || !errors.Is(err, fabric.ErrProcFailed) {
			failf("WriteAtAll with its aggregator killed: %v, want an IOError matching ErrProcFailed", err)
		}
		for _, r := range ioe.Undefined {
			if r.Off < 64<<10 || r.Len != 8 || (r.Off/8)%4 != int64(me) {
				failf("undefined range %+v is not this rank's, in the dead aggregator's domain", r)
			}
			undef += r.Len
		}
		if undef != 8*killCount/2 {
			failf("%d bytes undefined, want %d: %v", undef, 8*killCount/2, ioe.Undefined)
		}
	case me == 0 || me == 2:
		if ioe == nil || !errors.Is(err, fabric.ErrProcFailed) || len(ioe.Undefined) != 0 {
			failf("aggregator %d with a member killed: %v, want an IOError matching ErrProcFailed with nothing undefined", me, err)
		}
	default:
		must(err, "WriteAtAll of a rank whose aggregators live")
	}
	if n != len(data)-int(undef) {
		failf("WriteAtAll returned %d, want %d", n, len(data)-int(undef))
	}
	// Every byte of this rank's data outside the undefined ranges is in
	// the file.
	whole, err := os.ReadFile(p)
	must(err, "read the file")
	for i := range killCount {
		at := 8 * (4*i + me)
		if victim == 2 && at >= 64<<10 {
			continue
		}
		if at+8 > len(whole) || binary.LittleEndian.Uint64(whole[at:]) != value(me, i) {
			failf("element %d at byte %d is not in the file", i, at)
		}
	}
	if err := f.Close(ctx); !errors.Is(err, fabric.ErrProcFailed) {
		failf("Close with a member dead: %v, want ErrProcFailed", err)
	}
	return nil
}

// The failure tests at the start of a call, through the same four ranks
// and aggregators (0 and 2) as above, rank 3 the victim:
//
//   - TestKilledAtStart: rank 3 dies as its call starts, before the
//     header exchange. Nothing moved: every survivor's call raises an
//     IOError matching ErrProcFailed (or ErrRevoked: see all) with all
//     its bytes undefined.
//   - TestRaisedAtSome: rank 3 dies right after the header exchange, and
//     the exchange raised at rank 1 (a collective may raise at some
//     members and complete at others, as it did under load). Rank 1
//     returns an IOError with all its bytes undefined and never sends
//     its data; the aggregators, which wait for it, return too — once
//     rank 1 revoked the file, as a member whose call raises at the header
//     exchange does (the user revokes nothing) — with an IOError naming
//     every range of theirs the call may not have written. Before,
//     they waited for rank 1's data until their context ended (about
//     100 s in the runs that found it).
//   - TestRevokedBeforeCall: as TestKilledAtStart, but rank 0 calls
//     only once the others' revoke reached it: its call raises the same
//     IOError, matching ErrRevoked, with all its bytes undefined (it
//     returned a bare ErrRevoked, which once failed a run under load).
func TestKilledAtStart(t *testing.T)     { startJob(t, "start") }
func TestRaisedAtSome(t *testing.T)      { startJob(t, "raised") }
func TestRevokedBeforeCall(t *testing.T) { startJob(t, "late") }

func init() { progs.Add("startkill", progStartKill) }

func startJob(t *testing.T, how string) { killJob(t, "startkill", 3, "FILES_HOW="+how) }

func progStartKill(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me := c.Rank()
	how := os.Getenv("FILES_HOW")
	p := filepath.Join(dir(), "start")
	f, err := Open(ctx, c, p, ModeCreate|ModeRdWr, Hints{Buffering: BufferingOn, Aggregators: 2, BufferSize: 4096})
	must(err, "open")
	ft, _ := BlockCyclic(1, 4, int64(me))
	must(f.SetView(ctx, 0, 8, ft), "view")
	// (Every rank past SetView, a collective call on the file, which the
	// revoke below would otherwise cut.)
	must(collectives.Barrier(ctx, c), "barrier")
	data := make([]byte, 8*killCount)
	testHookHeaders = func(before bool, err error) error {
		switch {
		case me == 3 && before == (how != "raised"):
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		case me == 1 && !before && how == "raised":
			// Raise as a failure would, once it is known here.
			for ep.State(3) != fabric.Failed {
				ep.Poll()
				time.Sleep(time.Millisecond)
			}
			return ep.Failure(3)
		}
		return err
	}
	// The call must end on the failure, not on its context: a minute is
	// far beyond the detection time (failures on a node are seen through
	// pidfds within milliseconds; the detector's bound is 210 ms).
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// (The header Allgather is recursive doubling at this size: rank 2's
	// first partner is rank 3, so it raises and revokes without rank 0.)
	for t0 := time.Now(); how == "late" && me == 0 && !f.IsRevoked(); time.Sleep(time.Millisecond) {
		ep.Poll()
		if time.Since(t0) > time.Minute {
			failf("the file was not revoked")
		}
	}
	n, err := f.WriteAtAll(cctx, 0, data)
	testHookHeaders = nil
	// Rank 1 lives on, calling nothing, until the aggregators returned:
	// as a process that handles the error and goes on does (its exit
	// would be a failure that frees them).
	must(os.WriteFile(filepath.Join(dir(), fmt.Sprint("returned", me)), nil, 0o644), "say returned")
	if me == 1 {
		for _, r := range []int{0, 2} {
			for t0 := time.Now(); ; time.Sleep(time.Millisecond) {
				if _, err := os.Stat(filepath.Join(dir(), fmt.Sprint("returned", r))); err == nil {
					break
				}
				if time.Since(t0) > 2*time.Minute {
					failf("rank %d did not return from WriteAtAll", r)
				}
			}
		}
	}
	// ErrRevoked where the revoke of a member that raised came before
	// the news of the failure.
	var ioe *IOError
	if !errors.As(err, &ioe) || !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
		failf("WriteAtAll with rank 3 killed (%s): %v, want an IOError matching ErrProcFailed or ErrRevoked", how, err)
	}
	var undef int64
	for _, r := range ioe.Undefined {
		undef += r.Len
	}
	all := how != "raised" || me == 1
	if all && (undef != int64(len(data)) || n != 0) {
		failf("%d bytes written, %d undefined, want none written, all %d undefined: %v", n, undef, len(data), ioe.Undefined)
	}
	if n != len(data)-int(undef) {
		failf("WriteAtAll returned %d with %d bytes undefined, of %d", n, undef, len(data))
	}
	// The call revoked the file (see all): Close raises either way.
	if err := f.Close(ctx); !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
		failf("Close with a member dead: %v, want ErrProcFailed or ErrRevoked", err)
	}
	return nil
}
