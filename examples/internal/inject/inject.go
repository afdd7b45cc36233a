//go:build linux

// Package inject kills a process at a point of an example program that a
// test names, to show the example's recovery: FT_EXAMPLE_KILL lists
// "rank:point" pairs ("2:split,5:split").
package inject

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Env names the points to die at.
const Env = "FT_EXAMPLE_KILL"

// Point kills this process (SIGKILL) if FT_EXAMPLE_KILL names world rank
// rank at point.
func Point(rank int, point string) {
	for _, p := range strings.Split(os.Getenv(Env), ",") {
		r, name, ok := strings.Cut(p, ":")
		if n, err := strconv.Atoi(r); ok && err == nil && n == rank && name == point {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}
