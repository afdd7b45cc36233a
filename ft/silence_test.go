//go:build linux

package ft

import (
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
)

// TestSilence: the detector's measure of a heartbeat convicts when the
// silence since the look that saw it move reaches Timeout — at that
// moment, between ticks if need be, never before — and not after a look
// that came late (the observer's own silence) or before any count was
// read.
func TestSilence(t *testing.T) {
	o := Options{Timeout: 250 * time.Millisecond, Tick: 100 * time.Millisecond, StalledAfter: 60 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	type look struct {
		ms    float64
		count uint64
		seen  bool
		want  verdict
		left  time.Duration
		read  float64 // when the count was read, if not at the look
	}
	for _, tc := range []struct {
		name  string
		looks []look
	}{
		{"convicted at the timeout, between ticks", []look{
			{0, 1, true, beating, 0, 0},
			{100, 1, true, stalled, 0, 0},
			{200.001, 1, true, stalled, 49999 * time.Microsecond, 0},
			{249.999, 1, true, stalled, time.Microsecond, 0},
			{250, 1, true, convicted, 0, 0},
		}},
		{"a beat starts the measure again", []look{
			{0, 1, true, beating, 0, 0},
			{100, 1, true, stalled, 0, 0},
			{200, 2, true, beating, 0, 0},
			{300, 2, true, stalled, 0, 0},
			{400, 2, true, stalled, 50 * time.Millisecond, 0},
			{450, 2, true, convicted, 0, 0},
		}},
		{"a late look is the observer's own silence", []look{
			{0, 1, true, beating, 0, 0},
			{100, 1, true, stalled, 0, 0},
			{400, 1, true, quiet, 0, 0}, // 300 ms since the last look
			{500, 1, true, stalled, 0, 0},
			{600, 1, true, stalled, 50 * time.Millisecond, 0},
			{650, 1, true, convicted, 0, 0},
		}},
		{"the measure starts at the read that saw the beat", []look{
			{0, 1, true, beating, 0, 0},
			{100, 2, true, beating, 0, 96}, // read at 96 ms (over verbs, the tick before)
			{300, 2, true, stalled, 46 * time.Millisecond, 296},
			{346, 2, true, convicted, 0, 342},
		}},
		{"a read older than the last look starts nothing early", []look{
			{0, 1, true, beating, 0, 0},
			{100, 2, true, beating, 0, -50},
			{300, 2, true, stalled, 50 * time.Millisecond, 0},
			{350, 2, true, convicted, 0, 0},
		}},
		{"nothing read convicts nobody", []look{
			{0, 0, false, quiet, 0, 0},
			{100, 0, false, quiet, 0, 0},
			{200, 0, false, quiet, 0, 0},
			{300, 0, false, quiet, 0, 0},
			{400, 7, true, beating, 0, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := silence{o: o}
			s.restart(t0)
			for _, l := range tc.looks {
				b := fabric.Beat{Count: l.count}
				if l.seen {
					b.At = at(l.ms)
					if l.read != 0 {
						b.At = at(l.read)
					}
				}
				v, left := s.look(at(l.ms), b)
				if v != l.want || left != l.left {
					t.Fatalf("look at %v ms (count %d, seen %v): verdict %d, recheck in %v; want %d, %v",
						l.ms, l.count, l.seen, v, left, l.want, l.left)
				}
			}
		})
	}
}
