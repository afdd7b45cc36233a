package ftsim

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCurves measures the protocols against the reference collectives
// in the model, at 16 to $FTSIM_CURVES processes (unset: the test is
// skipped; lab/ftsim.sh sets 65536): it prints a Markdown table and, with
// $FTSIM_OUT, writes a CSV a series for rivet plot. The model is
// Cluster's without descheduling, so that each number is the protocol's
// own; one seed a size.
func TestCurves(t *testing.T) {
	top, _ := strconv.Atoi(os.Getenv("FTSIM_CURVES"))
	if top < 16 {
		t.Skip("FTSIM_CURVES=N (N ≥ 16) measures up to N processes: lab/ftsim.sh")
	}
	m := Cluster()
	us := func(d Time) float64 { return float64(d) / float64(time.Microsecond) }
	series := map[string][]string{}
	var b strings.Builder
	fmt.Fprintf(&b, "| processes | agree (µs) | allreduce (µs) | agree / allreduce | shrink (µs) | shrink / allreduce | revoke (µs) | barrier (µs) | revoke / barrier | messages a process: agree, revoke | one killed: detected everywhere (ms), agree after (µs) | a node of %d down: detected everywhere (ms), agree after (µs) |\n", m.PPN)
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for n := 16; n <= top; n *= 4 {
		run := func(sc Scenario) *Result {
			start := time.Now()
			r := Run(sc, 1)
			if err := r.Err(sc); err != nil {
				t.Fatal(err)
			}
			t.Logf("%v: %v simulated, %v to simulate", sc, r.Done, time.Since(start).Round(time.Millisecond))
			return r
		}
		agree := run(Scenario{Protocol: Agree, N: n, Model: m})
		allr := run(Scenario{Protocol: Allreduce, N: n, Model: m})
		shr := run(Scenario{Protocol: Shrink, N: n, Model: m})
		rev := run(Scenario{Protocol: Revoke, N: n, Model: m})
		bar := run(Scenario{Protocol: Barrier, N: n, Model: m})
		// One process killed as the agreement starts (not the root: its
		// own row would be the same detection), and a node's processes.
		one := run(Scenario{Protocol: Agree, N: n, Model: m, Faults: []Fault{{Rank: n / 2, Kind: Kill}}})
		after := func(r *Result) float64 { return us(r.Done - r.Detected) }
		nodeRow := "— (one node)"
		if n > m.PPN {
			node := run(Scenario{Protocol: Agree, N: n, Model: m, Faults: []Fault{{Rank: n / 2, Kind: Node}}})
			nodeRow = fmt.Sprintf("%.0f, %.1f", us(node.Detected)/1000, after(node))
		}
		fmt.Fprintf(&b, "| %d | %.1f | %.1f | %.2f | %.1f | %.2f | %.1f | %.1f | %.2f | %.2f, %.1f | %.0f, %.1f | %s |\n", n,
			us(agree.Done), us(allr.Done), float64(agree.Done)/float64(allr.Done),
			us(shr.Done), float64(shr.Done)/float64(allr.Done),
			us(rev.Done), us(bar.Done), float64(rev.Done)/float64(bar.Done),
			agree.Msgs, rev.Msgs,
			us(one.Detected)/1000, after(one), nodeRow)
		for name, v := range map[string]Time{"agree": agree.Done, "allreduce": allr.Done, "shrink": shr.Done, "revoke": rev.Done, "barrier": bar.Done} {
			series[name] = append(series[name], fmt.Sprintf("simulated %s,%d,%.3f", name, n, us(v)))
		}
	}
	t.Logf("the model: %+v\n%s", m, b.String())
	if dir := os.Getenv("FTSIM_OUT"); dir != "" {
		for name, rows := range series {
			data := "test,Processes,Latency (us)\n" + strings.Join(rows, "\n") + "\n"
			if err := os.WriteFile(filepath.Join(dir, "ftsim-"+name+".csv"), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
