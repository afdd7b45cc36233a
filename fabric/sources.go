//go:build linux

package fabric

import (
	"fmt"
	"strings"
)

// A Source is one way this process learns that a peer failed. Every
// source feeds the same knowledge (Failed, State, GetFailed), and each
// can be switched off — to measure the others, or to stand in for a
// machine that lacks it (a remote node has no pidfds).
type Source uint

// The failure sources.
const (
	// SourceHeartbeat: a failure detector's verdict on a heartbeat that
	// stopped (package ft; ft.Start refuses to run without it).
	SourceHeartbeat Source = 1 << iota
	// SourcePidfd: a process on this node exited (its pidfd).
	SourcePidfd
	// SourceLauncher: rivetrun -ft says a rank exited.
	SourceLauncher
	// SourceCompletion: the verbs provider's probes — an empty RDMA write
	// to each peer a call waits for, every 100 ms — fail (retries
	// exhausted). Failed completions of the process's own traffic always
	// fail the peer: an operation never waits on a broken queue pair.
	SourceCompletion
	// SourceAsync: the verbs device reports a queue pair in error, or
	// itself lost (uverbs async events).
	SourceAsync
	// SourceLink: the device's port goes down or up (Health reports the
	// peers reached through it unreachable meanwhile).
	SourceLink

	// AllSources is the default.
	AllSources = SourceHeartbeat | SourcePidfd | SourceLauncher | SourceCompletion | SourceAsync | SourceLink
)

var sourceNames = []string{"heartbeat", "pidfd", "launcher", "completion", "async", "link"}

func (s Source) String() string {
	var names []string
	for i, n := range sourceNames {
		if s&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// ParseSources reads a comma-separated list of source names
// ("heartbeat,pidfd"), "all" or "none".
func ParseSources(v string) (Source, error) {
	switch strings.TrimSpace(v) {
	case "all":
		return AllSources, nil
	case "none":
		return 0, nil
	}
	var s Source
	for _, f := range strings.Split(v, ",") {
		i := indexOf(sourceNames, strings.TrimSpace(f))
		if i < 0 {
			return 0, fmt.Errorf("%w: failure source %q (want %s, all or none)", ErrInvalid, f, strings.Join(sourceNames, ", "))
		}
		s |= 1 << i
	}
	return s, nil
}

func indexOf(names []string, n string) int {
	for i, x := range names {
		if x == n {
			return i
		}
	}
	return -1
}

// WithFailureSources chooses the sources this process learns of failures
// from (default AllSources). The RIVET_FT_SOURCES environment variable
// sets the same ("heartbeat,pidfd", "all", "none").
func WithFailureSources(s Source) Option { return func(o *options) { o.sources = s } }

// Sources reports the failure sources this endpoint uses.
func (ep *Endpoint) Sources() Source { return ep.opts.sources }
