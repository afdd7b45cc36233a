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
	for name, env := range providers(t) {
		t.Run(name, func(t *testing.T) {
			env := append(env, "FILES_DIR="+t.TempDir(), "FILES_VICTIM="+victim)
			out, errs, st := progs.Run(t, 4, "kill", true, env...)
			if st != 128+9 {
				t.Fatalf("status %d, want 137 (the victim killed)\n%s\n%s", st, out, errs)
			}
			v, _ := strconv.Atoi(victim)
			for r := range 4 {
				if r != v && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
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
