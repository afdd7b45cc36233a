package ulfm

import (
	"testing"
	"time"
)

// TestSilence: the detector's measure of a heartbeat convicts a process
// its node's kernel says is stopped when the silence since the look that
// saw it move reaches Timeout — at that moment, between ticks if need
// be, never before — and not before any count was read (its node is
// asked instead, once the watch is Timeout old). Without the kernel's
// word the silence counts only the time the observer was looking (the
// jitter guard): a late look's interval beyond two ticks is left out, and
// late looks again and again delay a conviction, never stop it. And it
// convicts
// only on evidence: never a process that waits to run or sleeps, however
// long; one on another node when reads go unanswered, or after
// Unconfirmed.
func TestSilence(t *testing.T) {
	o := Times{Timeout: 250 * time.Millisecond, Tick: 100 * time.Millisecond, StalledAfter: 60 * time.Millisecond,
		Unconfirmed: 1000 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	type look struct {
		ms    float64
		count uint64
		seen  bool
		want  Verdict
		left  time.Duration
		read  float64 // when the count was read, if not at the look
	}
	stopped := []Runstate{RunStopped}
	for _, tc := range []struct {
		name  string
		looks []look
		// what the kernel says at each probe (the last one from then on)
		kernel []Runstate
	}{
		{"convicted at the timeout, between ticks", []look{
			{0, 1, true, Beating, 0, 0},
			{100, 1, true, Stalled, 0, 0},
			{200.001, 1, true, Stalled, 49999 * time.Microsecond, 0},
			{249.999, 1, true, Stalled, time.Microsecond, 0},
			{250, 1, true, Convicted, 0, 0},
		}, stopped},
		{"a beat starts the measure again", []look{
			{0, 1, true, Beating, 0, 0},
			{100, 1, true, Stalled, 0, 0},
			{200, 2, true, Beating, 0, 0},
			{300, 2, true, Stalled, 0, 0},
			{400, 2, true, Stalled, 50 * time.Millisecond, 0},
			{450, 2, true, Convicted, 0, 0},
		}, stopped},
		{"a late look is the observer's own silence, on another node", []look{
			{0, 1, true, Beating, 0, 0},
			{100, 1, true, Stalled, 0, 0},
			{400, 1, true, Stalled, 0, 0}, // 300 ms since the last look
			{500, 1, true, Stalled, 0, 500},
			{600, 1, true, Stalled, 0, 500}, // unanswered for 100 ms
			{650, 1, true, Convicted, 0, 500},
		}, []Runstate{RunUnknown}},
		{"the observer's absence is not counted", []look{
			{0, 1, true, Beating, 0, -0.001},
			{400, 1, true, Stalled, 0, -0.001}, // 400 ms, 200 of them counted
			{450, 1, true, Convicted, 0, -0.001},
		}, []Runstate{RunUnknown}},
		{"late looks again and again delay a conviction, never stop it", []look{
			{0, 1, true, Beating, 0, -0.001},
			{250, 1, true, Stalled, 0, -0.001}, // each look 50 ms late
			{500, 1, true, Convicted, 0, -0.001},
		}, []Runstate{RunUnknown}},
		{"a late look convicts on the kernel's word", []look{
			{0, 1, true, Beating, 0, 0},
			{100, 1, true, Stalled, 0, 0},
			{400, 1, true, Convicted, 0, 0},
		}, stopped},
		{"the measure starts at the read that saw the beat", []look{
			{0, 1, true, Beating, 0, 0},
			{100, 2, true, Beating, 0, 96}, // read at 96 ms (over verbs, the tick before)
			{300, 2, true, Stalled, 46 * time.Millisecond, 296},
			{346, 2, true, Convicted, 0, 342},
		}, stopped},
		{"a read older than the last look starts nothing early", []look{
			{0, 1, true, Beating, 0, 0},
			{100, 2, true, Beating, 0, -50},
			{300, 2, true, Stalled, 50 * time.Millisecond, 0},
			{350, 2, true, Convicted, 0, 0},
		}, stopped},
		{"nothing read convicts nobody: after Timeout, its node is asked", []look{
			{0, 0, false, Quiet, 0, 0},
			{100, 0, false, Quiet, 0, 0},
			{200, 0, false, Quiet, 0, 0},
			{250, 0, false, Unreached, 0, 0},
			{300, 0, false, Unreached, 0, 0},
			{400, 7, true, Beating, 0, 0},
			{500, 7, true, Stalled, 0, 0}, // the measure runs from the first read
			{600, 7, true, Stalled, 50 * time.Millisecond, 0},
		}, stopped},
		{"gone and frozen convict like stopped", []look{
			{0, 1, true, Beating, 0, 0},
			{100, 1, true, Stalled, 0, 0},
			{200, 1, true, Stalled, 50 * time.Millisecond, 0},
			{250, 1, true, Convicted, 0, 0},
		}, []Runstate{RunGone}},
		{"waiting to run never convicts", []look{
			{0, 1, true, Beating, 0, 0},
			{200, 1, true, Stalled, 50 * time.Millisecond, 0},
			{250, 1, true, Stalled, 0, 0},
			{350, 1, true, Stalled, 0, 0},
			{450, 1, true, Stalled, 0, 0},
			{550, 1, true, Stalled, 0, 0},
			{650, 1, true, Stalled, 0, 0},
			{750, 1, true, Stalled, 0, 0},
			{850, 1, true, Stalled, 0, 0},
			{950, 1, true, Stalled, 0, 0},
			{1050, 1, true, Stalled, 0, 0},
			{1150, 2, true, Beating, 0, 0}, // it ran at last
		}, []Runstate{RunWaiting}},
		{"asleep never convicts: its timer may be held with its CPU", []look{
			{0, 1, true, Beating, 0, 0},
			{200, 1, true, Stalled, 50 * time.Millisecond, 0},
			{250, 1, true, Stalled, 0, 0},
			{350, 1, true, Stalled, 0, 0},
			{450, 1, true, Stalled, 0, 0},
			{550, 1, true, Stalled, 0, 0},
			{650, 2, true, Beating, 0, 0},
		}, []Runstate{RunAsleep, RunWaiting, RunAsleep}},
		{"another node: answered reads wait for Unconfirmed", []look{
			{0, 1, true, Beating, 0, 0},
			{100, 1, true, Stalled, 0, 0},
			{200, 1, true, Stalled, 50 * time.Millisecond, 0},
			{250, 1, true, Stalled, 0, 0},
			{350, 1, true, Stalled, 0, 0},
			{450, 1, true, Stalled, 0, 0},
			{550, 1, true, Stalled, 0, 0},
			{650, 1, true, Stalled, 0, 0},
			{750, 1, true, Stalled, 0, 0},
			{850, 1, true, Stalled, 0, 0},
			{950, 1, true, Stalled, 0, 0},
			{1000, 1, true, Convicted, 0, 0},
		}, []Runstate{RunUnknown}},
		{"another node: unanswered reads convict at Timeout", []look{
			{0, 1, true, Beating, 0, 0},
			{100, 1, true, Stalled, 0, 100},
			{200, 1, true, Stalled, 50 * time.Millisecond, 100},
			{250, 1, true, Convicted, 0, 100}, // the last answer came 150 ms ago
		}, []Runstate{RunUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSilence(o, t0)
			for _, l := range tc.looks {
				b := Reading{Count: l.count}
				if l.seen {
					b.At = at(l.ms)
					if l.read != 0 {
						b.At = at(l.read)
					}
				}
				probe := func() Runstate {
					rs := tc.kernel[0]
					if len(tc.kernel) > 1 {
						tc.kernel = tc.kernel[1:]
					}
					return rs
				}
				v, left := s.Look(at(l.ms), b, probe)
				if v != l.want || left != l.left {
					t.Fatalf("look at %v ms (count %d, seen %v): verdict %d, recheck in %v; want %d, %v",
						l.ms, l.count, l.seen, v, left, l.want, l.left)
				}
			}
		})
	}
}

// TestSilenceHeldObserver: an observer held for a second (its whole
// node, in a virtual machine, so its read was not even sent) does not
// count that second as its read going unanswered: a process on another
// node whose reads were answered but whose heartbeat stood still for the
// timeout is convicted only once a read goes unanswered for half the
// timeout of the observer's own looking — not at the first look after
// the hold, which finds the last read, sent before it, still open.
func TestSilenceHeldObserver(t *testing.T) {
	ms := time.Millisecond
	o := Times{Timeout: 2000 * ms, Tick: 5 * ms, StalledAfter: 500 * ms, Unconfirmed: 20000 * ms}
	t0 := time.Unix(1000, 0)
	s := NewSilence(o, t0)
	unknown := func() Runstate { return RunUnknown }
	look := func(at, read time.Duration) Verdict {
		v, _ := s.Look(t0.Add(at), Reading{Count: 1, At: t0.Add(read)}, unknown)
		return v
	}
	if v := look(0, 0); v != Beating {
		t.Fatalf("first look: %d", v)
	}
	// Reads answered every tick, the count standing still (a starved
	// heartbeat thread): stalled, never convicted before Unconfirmed.
	for at := 5 * ms; at <= 2500*ms; at += 5 * ms {
		if v := look(at, at); v != Stalled && v != Quiet {
			t.Fatalf("answered look at %v: verdict %d", at, v)
		}
	}
	// The observer held from 2500 to 3500 ms; its read of 2500 ms is
	// still open when it looks again, and for as long as it looks.
	for at := 3500 * ms; at < 4490*ms; at += 5 * ms {
		if v := look(at, 2500*ms); v != Stalled {
			t.Fatalf("look at %v, %v after the hold: verdict %d, want stalled", at, at-3500*ms, v)
		}
	}
	if v := look(4490*ms, 2500*ms); v != Convicted {
		t.Fatalf("look at 4490 ms, the read unanswered for 1 s of the observer's looking: verdict %d, want convicted", v)
	}
}

// TestNodeProbe: a node that answers nothing within the timeout is
// convicted at the timeout, not before; any answer, at any time before,
// clears it.
func TestNodeProbe(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	p := NewNodeProbe(t0, 200*time.Millisecond)
	for _, l := range []struct {
		at   int
		want Verdict
		left time.Duration
	}{{0, Quiet, 200 * time.Millisecond}, {150, Quiet, 50 * time.Millisecond}, {199, Quiet, time.Millisecond}, {200, Convicted, 0}, {900, Convicted, 0}} {
		if v, left := p.Look(ms(l.at)); v != l.want || left != l.left {
			t.Fatalf("silent node, look at %d ms: %d, %v; want %d, %v", l.at, v, left, l.want, l.left)
		}
	}
	p = NewNodeProbe(t0, 200*time.Millisecond)
	if v, _ := p.Look(ms(100)); v != Quiet {
		t.Fatalf("before an answer: %d", v)
	}
	p.Answer()
	for _, at := range []int{150, 200, 5000} {
		if v, left := p.Look(ms(at)); v != Beating || left != 0 {
			t.Fatalf("answered, look at %d ms: %d, %v; want Beating", at, v, left)
		}
	}
}
