package main

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// rmaBudget is what Rivet's own code may execute per 8-byte one-sided
// operation and its flush, in a passive-target epoch over verbs (soft-
// RoCE): instructions and atomic read-modify-writes, as lab/rmaloop
// runs them and lab/insncount.sh counts them. perftest's loops, the
// reference, run 466 (ib_read_lat) and 396 (ib_atomic_lat) instructions
// per operation with 2 atomics (docs/performance.md). Each budget is
// the largest count measured when it was set (2 078, 2 195, 2 273,
// 2 092, 2 234; 8.1–8.5 atomics) plus about 20%: the blocks of the
// flush's wait that run a varying few times per operation move the
// count by up to 7% from run to run. A change that makes a path grow
// past its budget fails here; one that makes it shrink should lower the
// budget.
var rmaBudget = map[string]struct{ insns, atomics float64 }{
	"put@verbs": {2500, 10},
	"get@verbs": {2650, 10},
	"fop@verbs": {2700, 10},
	"cas@verbs": {2550, 10},
	"acc@verbs": {2700, 10},
}

var ownLine = regexp.MustCompile(`(?m)^rmaloop (\S+) 8 .*\n +own: (-?[0-9.]+) instructions, (-?[0-9.]+) atomics`)

// TestRMABudget runs lab/insncount.sh on lab/rmaloop in an rxevm VM with
// soft-RoCE and checks each operation's counts against rmaBudget. It
// boots a VM and builds the programs: about a minute.
func TestRMABudget(t *testing.T) {
	testutil.RequireVM(t)
	testutil.LookTool(t, "gcc", "gcc")
	cmd := exec.Command("bash", "../insncount.sh")
	cmd.Env = append(os.Environ(), "TESTS=rmaloop", "N1=1000", "N2=6000", "TERM=dumb")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("insncount.sh: %v\n%s", err, out)
	}
	got := map[string][2]float64{}
	for _, m := range ownLine.FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.ParseFloat(m[2], 64)
		a, _ := strconv.ParseFloat(m[3], 64)
		got[m[1]] = [2]float64{n, a}
	}
	for op, b := range rmaBudget {
		c, ok := got[op]
		if !ok {
			t.Errorf("%s: no count in insncount.sh's output", op)
			continue
		}
		t.Logf("%s: %.0f instructions (budget %.0f), %.1f atomics (budget %.0f)", op, c[0], b.insns, c[1], b.atomics)
		if c[0] > b.insns || c[1] > b.atomics {
			t.Errorf("%s: %.0f instructions and %.1f atomics per operation, over its budget of %.0f and %.0f", op, c[0], c[1], b.insns, b.atomics)
		}
		if c[0] < 100 {
			t.Errorf("%s: %.0f instructions per operation: too few to be a count of the loop", op, c[0])
		}
	}
	if t.Failed() {
		t.Logf("insncount.sh's output:\n%s", out)
	}
}
