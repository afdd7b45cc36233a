//go:build linux

package perf

import (
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rivet-hpc/rivet/internal/tsc"
)

// The latency loops time each operation with stamp, which is the
// time-stamp counter where the kernel itself keeps time by it, as
// perftest times them (one RDTSC per operation, converted with the CPU's
// rate). time.Now costs more — two vDSO calls and the runtime's
// bookkeeping were 0.9% of an atomic_lat client's samples in the VM — and
// that is charged to every operation.
// Elsewhere stamp is the monotonic clock in nanoseconds.
var (
	useTSC    bool
	nsPerTick = 1.0
	clockOnce sync.Once
)

// calibrate measures the counter's rate against the monotonic clock, once
// per process.
func calibrate() {
	clockOnce.Do(func() {
		src, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
		if !tsc.Have || err != nil || strings.TrimSpace(string(src)) != "tsc" {
			return
		}
		t0, c0 := time.Now(), tsc.Read()
		for time.Since(t0) < 20*time.Millisecond {
		}
		c1, d := tsc.Read(), time.Since(t0)
		if c1 <= c0 {
			return
		}
		useTSC, nsPerTick = true, float64(d.Nanoseconds())/float64(c1-c0)
	})
}

// stamp is a reading of the latency loops' clock, in ticks.
func stamp() int64 {
	if useTSC {
		return int64(tsc.Read())
	}
	return nanotime()
}

// ticksToNs converts a difference of stamps to nanoseconds.
func ticksToNs(d int64) float64 { return float64(d) * nsPerTick }
