// Package godebug reads and sets the Go runtime's asynchronous-preemption
// setting in GODEBUG, for Rivet's benchmark commands.
//
// The runtime preempts a goroutine that has run 10 ms without a scheduling
// point by sending its thread a signal. A benchmark's busy-polling loop
// always qualifies, and each signal lands in a timed operation.
// GODEBUG=asyncpreemptoff=1 turns the signals off, but the runtime reads
// GODEBUG once, at start-up, so a program that wants it must re-execute
// itself with it set.
package godebug

import (
	"strconv"
	"strings"
)

// AsyncPreemptOff is the setting the benchmark commands run with.
const AsyncPreemptOff = "asyncpreemptoff=1"

const key = "asyncpreemptoff="

// AsyncPreemption reports whether godebug (a GODEBUG value) leaves
// asynchronous preemption on. As in the runtime, the last setting of the
// key wins, and any non-zero number turns preemption off.
func AsyncPreemption(godebug string) bool {
	off := false
	for _, s := range strings.Split(godebug, ",") {
		if v, ok := strings.CutPrefix(s, key); ok {
			if n, err := strconv.Atoi(v); err == nil {
				off = n != 0
			}
		}
	}
	return !off
}

// State is "on" or "off", as AsyncPreemption reports, for headers.
func State(godebug string) string {
	if AsyncPreemption(godebug) {
		return "on"
	}
	return "off"
}

// WithAsyncPreemptOff returns environ with AsyncPreemptOff added to its
// GODEBUG, and false if GODEBUG already sets the key either way (a user's
// choice wins).
func WithAsyncPreemptOff(environ []string) ([]string, bool) {
	env := make([]string, 0, len(environ)+1)
	set := false
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			for _, s := range strings.Split(v, ",") {
				if strings.HasPrefix(s, key) {
					return nil, false
				}
			}
			if v != "" {
				kv += ","
			}
			kv += AsyncPreemptOff
			set = true
		}
		env = append(env, kv)
	}
	if !set {
		env = append(env, "GODEBUG="+AsyncPreemptOff)
	}
	return env, true
}
