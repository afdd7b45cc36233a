//go:build linux

package rma

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/launch"
)

// TestHostExampleCounter builds examples/counter and runs it on 1 and 4
// ranks on the host (the VM has no Go toolchain): it checks its own
// answers and fails otherwise.
func TestHostExampleCounter(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build the example with")
	}
	bin := filepath.Join(t.TempDir(), "counter")
	if out, err := exec.Command(goTool, "build", "-o", bin, "../examples/counter").CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	for _, n := range []int{1, 4} {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		st := launch.Run(ctx, launch.Options{N: n, Grace: time.Second, Stdout: &out, Stderr: &errb}, []string{bin})
		cancel()
		if st != 0 || !strings.Contains(out.String(), "sum of squares 332833500") || !strings.Contains(out.String(), "halo of rank 0") {
			t.Fatalf("%d ranks: status %d\n%s\n%s", n, st, out.String(), errb.String())
		}
	}
}
