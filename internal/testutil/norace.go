//go:build !race

package testutil

// Race reports whether the race detector is on: some tests are too large
// for it (every process of theirs would carry its shadow memory).
const Race = false
