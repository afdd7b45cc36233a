package layers

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/rivet-hpc/rivet"

// rank is each package's layer: a package may import only packages of a
// lower rank (test files may import anything). A package missing here
// fails the test, so that a new one is placed on purpose.
var rank = map[string]int{
	"internal/tsc":       0,
	"internal/elem":      0,
	"internal/reduce":    0,
	"internal/godebug":   0,
	"internal/progress":  0,
	"internal/falloc":    0,
	"internal/nodecoll":  0,
	"internal/ulfm":      0,
	"internal/ftsim":     1,
	"internal/critpath":  1,
	"internal/heartbeat": 1,
	"op":                 1,
	"internal/uverbs":    2,
	"internal/rxe":       2,
	"hw":                 3,
	"hw/netfault":        4,
	"verbs":              4,
	"internal/pmi":       4,
	"internal/pmix":      1, // needs only the standard library
	"internal/sysmon":    4,
	// The fabric: how processes meet, its formats, its providers, then
	// the package that joins them.
	"fabric/bootstrap":         5,
	"fabric/internal/wire":     5,
	"fabric/internal/shmseg":   5,
	"fabric/internal/shm":      6,
	"fabric/internal/rdma":     6,
	"fabric":                   7,
	"collectives":              8,
	"rma":                      9,
	"ft":                       10,
	"files":                    10, // (beside ft: neither imports the other)
	"internal/launch":          11,
	"bench/osu":                11,
	"bench/perf":               11,
	"bench/ftbench":            11,
	"bench/iobench":            11,
	"bench/results":            0,
	"bench/chart":              1,
	"internal/vm":              11,
	"cmd/rivet":                12,
	"cmd/rivetrun":             12,
	"cmd/rxevm":                12,
	"examples/internal/inject": 11,
	"examples/*":               12,
	// Test helpers: no package's own code may import them.
	"internal/testutil":  testsOnly,
	"internal/jobtest":   testsOnly + 1, // gates on testutil
	"internal/slurmtest": testsOnly + 1, // gates on testutil
	"internal/layers":    testsOnly,
}

const testsOnly = 1 << 20

func rankOf(pkg string) (int, bool) {
	if r, ok := rank[pkg]; ok {
		return r, true
	}
	if i := strings.LastIndex(pkg, "/"); i > 0 {
		r, ok := rank[pkg[:i]+"/*"]
		return r, ok
	}
	return 0, false
}

// TestLayers lists every package's imports, in the ordinary build and in
// the probe build (-tags rivetprobe), and checks each import of one of
// Rivet's packages goes down the layers.
func TestLayers(t *testing.T) {
	for _, tags := range []string{"", "rivetprobe"} {
		cmd := exec.Command("go", "list", "-tags", tags, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, stderr.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			pkg := strings.TrimPrefix(f[0], module+"/")
			from, ok := rankOf(pkg)
			if !ok {
				t.Errorf("%s has no layer: add it to rank in internal/layers, and to docs/architecture.md", pkg)
				continue
			}
			for _, imp := range f[1:] {
				dep, ours := strings.CutPrefix(imp, module+"/")
				if !ours {
					continue
				}
				to, ok := rankOf(dep)
				if !ok {
					continue // reported as a package of its own
				}
				if to >= from {
					t.Errorf("%s imports %s (tags %q): a layer may import only the layers below it", pkg, dep, tags)
				}
			}
		}
	}
}
