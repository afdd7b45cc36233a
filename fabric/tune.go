//go:build linux

package fabric

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/rivet-hpc/rivet/internal/sysmon"
)

// tuneMonitor applies WithProcessTuning's choice for the Go runtime's
// monitor thread (RIVET_SYSMON) when it is asked for by name; "auto", the
// default, waits for tuneMonitorAuto.
func (o *options) tuneMonitor() error {
	if !o.tune || o.sysmon == "auto" {
		return nil
	}
	if err := sysmon.Apply(o.sysmon); err != nil {
		return fmt.Errorf("fabric: process tuning: %w", err)
	}
	return nil
}

// tuneMonitorAuto applies "auto" once Init knows whether this node has
// more ranks than CPUs: the monitor is lowered on a pinned rank only if
// the node is not oversubscribed. On an oversubscribed node a rank's
// waits yield to the other ranks, so the monitor's turn under SCHED_IDLE
// hardly ever comes — and with it the network poll: 8 ranks on a VM of
// one CPU left connection handshakes unanswered for their whole 30 s.
func (o *options) tuneMonitorAuto(oversubscribed bool) {
	if o.tune && o.sysmon == "auto" && !oversubscribed {
		sysmon.Apply("auto") // "auto" only makes things faster: never an error
	}
}

// nodeCPUs is how many CPUs this node has online. It is not
// runtime.NumCPU, which counts the CPUs this process may run on when it
// started: a rank that mpirun --bind-to core, rivetrun -bind-to or
// taskset pinned before it started sees one, and would take a node of
// pinned ranks, one per CPU, for an oversubscribed one.
func nodeCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	n, ok := countCPUList(strings.TrimSpace(string(b)))
	if !ok {
		return runtime.NumCPU()
	}
	return n
}

// countCPUList counts the CPUs of a kernel CPU list such as "0-3,8,10-11".
func countCPUList(list string) (int, bool) {
	n := 0
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, false
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, false
			}
		}
		n += b - a + 1
	}
	return n, n > 0
}
