package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// LogRXECountersOnFailure snapshots every RDMA port's hardware counters
// and, if t fails, logs those that moved. rxe counts retransmissions,
// sequence errors, duplicate requests and retry errors there, which tell
// a dropped packet from a peer that stopped answering.
func LogRXECountersOnFailure(t testing.TB) {
	before := RDMACounters()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("RDMA counters that moved during the test:%s", CountersMoved(before, RDMACounters()))
	})
}

// CountersMoved lists the RDMA counters that differ between two
// snapshots (RDMACounters), in name order, each as " DEV/N/NAME+delta".
func CountersMoved(before, after map[string]int64) string {
	keys := make([]string, 0, len(after))
	for k := range after {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		if d := after[k] - before[k]; d != 0 {
			fmt.Fprintf(&b, " %s+%d", k, d)
		}
	}
	return b.String()
}

// RDMACounters reads every RDMA port's hardware counters
// (/sys/class/infiniband/DEV/ports/N/hw_counters/NAME), keyed
// "DEV/N/NAME".
func RDMACounters() map[string]int64 {
	m := map[string]int64{}
	files, _ := filepath.Glob("/sys/class/infiniband/*/ports/*/hw_counters/*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		parts := strings.Split(f, string(filepath.Separator))
		// …/infiniband/DEV/ports/N/hw_counters/NAME
		n := len(parts)
		m[parts[n-5]+"/"+parts[n-3]+"/"+parts[n-1]] = v
	}
	return m
}
