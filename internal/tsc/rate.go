package tsc

import "time"

// KHz measures the counter's rate against the monotonic clock across
// about d, in kHz; 0 without a counter, or if it did not advance. Each
// end of the span is the tightest of several counter reads bracketing a
// clock read, so that a preemption between two reads does not skew it.
func KHz(d time.Duration) uint64 {
	if !Have {
		return 0
	}
	c0, t0 := stamp()
	time.Sleep(d)
	c1, t1 := stamp()
	ns := t1.Sub(t0).Nanoseconds()
	if c0 == 0 || c1 <= c0 || ns <= 0 {
		return 0
	}
	return uint64(float64(c1-c0) * 1e6 / float64(ns))
}

// stamp is a counter read and the clock read it brackets most tightly, of
// up to 64 tries (fewer once two counter reads are 2000 ticks apart at
// most: a microsecond at 2 GHz); 0 if no try bracketed it.
func stamp() (uint64, time.Time) {
	var (
		c    uint64
		t    time.Time
		best = ^uint64(0)
	)
	for i := 0; i < 64 && best > 2000; i++ {
		a := Read()
		now := time.Now()
		b := Read()
		if b >= a && b-a < best {
			best, c, t = b-a, a+(b-a)/2, now
		}
	}
	return c, t
}
