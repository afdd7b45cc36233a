//go:build rivetprobe && amd64

package critpath

import "github.com/rivet-hpc/rivet/internal/tsc"

// Enabled reports whether this build measures.
const Enabled = true

var t0, sum, count uint64

// Arrived marks a message seen; the first mark since the last doorbell
// starts the interval.
func Arrived() {
	if t0 == 0 {
		t0 = Now()
	}
}

// Doorbell ends the interval an Arrived started, if any.
func Doorbell() {
	if t0 != 0 {
		sum += Now() - t0
		count++
		t0 = 0
	}
}

// Reset clears the tally.
func Reset() { t0, sum, count = 0, 0, 0 }

// Tally returns the intervals' total, in Now's ticks, and their number.
func Tally() (ticks, n uint64) { return sum, count }

// Now reads the time-stamp counter.
func Now() uint64 { return tsc.Read() }
