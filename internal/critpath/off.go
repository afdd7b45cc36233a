//go:build !rivetprobe || !amd64

package critpath

// Enabled reports whether this build measures.
const Enabled = false

// Arrived marks a message seen; the first mark since the last doorbell
// starts the interval.
func Arrived() {}

// Doorbell ends the interval an Arrived started, if any.
func Doorbell() {}

// Reset clears the tally.
func Reset() {}

// Tally returns the intervals' total, in Now's ticks, and their number.
func Tally() (ticks, n uint64) { return 0, 0 }

// Now reads the time-stamp counter.
func Now() uint64 { return 0 }
