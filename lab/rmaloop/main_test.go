//go:build linux

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoops runs rmaloop on shared memory under rivetrun, with few
// iterations: it must call its marker (a page of its own, outside any
// VM here) and report each operation's two marked runs in order.
func TestLoops(t *testing.T) {
	dir := t.TempDir()
	for _, b := range [][]string{
		{"build", "-C", "../..", "-o", filepath.Join(dir, "rivetrun"), "./cmd/rivetrun"},
		{"build", "-o", filepath.Join(dir, "rmaloop"), "."},
	} {
		if out, err := exec.Command("go", b...).CombinedOutput(); err != nil {
			t.Fatalf("go %q: %v\n%s", b, err, out)
		}
	}
	out, err := exec.Command(filepath.Join(dir, "rivetrun"), "-n", "2", filepath.Join(dir, "rmaloop"),
		"-n1", "10", "-n2", "30", "-x", "5").CombinedOutput()
	if err != nil {
		t.Fatalf("rmaloop: %v\n%s", err, out)
	}
	var want []string
	for _, op := range []string{"put", "get", "fop", "cas", "acc"} {
		want = append(want, "SECTION rmaloop "+op+" 8 10", "SECTION rmaloop "+op+" 8 30")
	}
	if got := strings.TrimSpace(string(out)); got != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	bad, err := exec.Command(filepath.Join(dir, "rivetrun"), "-n", "2", filepath.Join(dir, "rmaloop"), "-ops", "xor").CombinedOutput()
	if err == nil || !strings.Contains(string(bad), `unknown operation "xor"`) {
		t.Errorf("-ops xor: %v\n%s", err, bad)
	}
}
