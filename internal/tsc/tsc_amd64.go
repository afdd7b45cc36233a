package tsc

// Have reports whether Read reads a time-stamp counter.
const Have = true

// Read returns the time-stamp counter.
func Read() uint64
