package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Two runs of one program, 100 and 300 iterations: a kernel block of 10
// instructions (one of them atomic, ending in a chained branch) run twice
// per iteration, a user work block of 5 (ending in a return) run once, a
// polling block of 3 run 50 times, and start-up (a block run once per
// run) that must cancel.
const testCounts = `mark 0 vcpu 0
ffffffff81000000 10 1 b 999 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
mark 1 vcpu 0
ffffffff81000000 10 1 b 200 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
401000 5 0 r 100 0 0 0 0 0 0 0 100 0 0 0 0 0 0 0
402000 3 0 b 5000 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
403000 7 0 J 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0
mark 2 vcpu 1
401000 5 0 r 77 0 0 0 0 0 0 0 77 0 0 0 0 0 0 0
mark 3 vcpu 0
ffffffff81000000 10 1 b 600 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
401000 5 0 r 300 4 0 0 0 0 0 0 300 4 0 0 0 0 0 0
402000 3 0 b 15000 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
403000 7 0 J 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0
`

func TestParse(t *testing.T) {
	secs, err := parseCounts(strings.NewReader(testCounts))
	if err != nil {
		t.Fatal(err)
	}
	if len(secs) != 4 {
		t.Fatalf("%d sections, want 4", len(secs))
	}
	if c := secs[3][blockKey{0x401000, 5, 0, 'r'}]; c[0] != 300 || c[1] != 4 {
		t.Errorf("section 3, block 401000: %v", c)
	}
	runs, err := parseSections("prog test 100\nprog test 300\n", secs)
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].label != "prog test" || runs[0].iters != 100 || runs[1].iters != 300 {
		t.Errorf("runs: %+v", runs)
	}
	labels, diffs, err := pair(runs)
	if err != nil {
		t.Fatal(err)
	}
	if len(labels) != 1 {
		t.Fatalf("labels %q", labels)
	}
	s := diffs[0].split(0, 8)
	if s.kernel != 20 || s.work != 5 || s.poll != 150 || s.kernelAtomics != 2 || s.workAtomics != 0 {
		t.Errorf("split %+v, want kernel 20 (2 atomics), work 5, poll 150", s)
	}
	if s.kernelBlocks != 2 || s.workBlocks != 1 || s.kernelLookups != 0 || s.workLookups != 1 {
		t.Errorf("split %+v, want kernel 2 blocks (none looked up), work 1 (looked up)", s)
	}
	if s1 := diffs[0].split(1, 8); s1.work != 5*4.0/200 {
		t.Errorf("vCPU 1 work %v", s1.work)
	}
	// A binary whose functions end before 0x402000 owns the work block
	// (on both vCPUs), not the polling one; one that starts after it
	// owns nothing.
	own := diffs[0].own(&symtab{addrs: []uint64{0x401000}, names: []string{"f"}, end: 0x402000}, 8, 2)
	if own.n != 5+5*4.0/200 || own.blocks != 1+4.0/200 || own.lookups != 1+4.0/200 || own.atomic != 0 {
		t.Errorf("own %+v, want 5.1 instructions in 1.02 blocks, as many looked up", own)
	}
	if o := diffs[0].own(&symtab{addrs: []uint64{0x20001000}, names: []string{"f"}, end: 0x20002000}, 8, 2); o.n != 0 {
		t.Errorf("own of a binary elsewhere %+v, want nothing", o)
	}
}

// TestSnapshotSkew: a mark reads a block's lookups and then its
// executions while the other vCPUs run on, so executions that ran in
// between are in one section and their lookups in the next, which then
// holds more lookups than executions (a run under load had 9942 after
// 9940). That is not bad input.
func TestSnapshotSkew(t *testing.T) {
	const skewed = `mark 0 vcpu 0
401000 5 0 r 0 12 0 0 0 0 0 0 0 10 0 0 0 0 0 0
mark 1 vcpu 0
401000 5 0 r 0 9940 0 0 0 0 0 0 0 9942 0 0 0 0 0 0
`
	secs, err := parseCounts(strings.NewReader(skewed))
	if err != nil {
		t.Fatal(err)
	}
	if c := secs[1][blockKey{0x401000, 5, 0, 'r'}]; c[1] != 9940 || c[maxVCPUs+1] != 9942 {
		t.Errorf("section 1: %v", c)
	}
}

func TestBadInput(t *testing.T) {
	for _, c := range []string{
		"401000 5 0 r 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n",                 // counts before any mark
		"mark 0 vcpu 0\n401000 x 0 r 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n",  // bad length
		"mark 0 vcpu 0\nzz 5 0 r 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n",      // bad address
		"mark 0 vcpu 0\n401000 5 y r 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n",  // bad atomics
		"mark 0 vcpu 0\n401000 5 6 r 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n",  // more atomics than instructions
		"mark 0 vcpu 0\n401000 5 0 r 1 0 0 0 0 0 0 0\n",                  // no lookups
		"mark 0 vcpu 0\n401000 5 0 r 1 -3 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n", // bad count
		"mark 0 vcpu 0\n401000 5 0 1 0 0 0 0 0 0 0\n",                    // no exit kind or lookups (the old format)
		"mark 0 vcpu 0\n401000 5 0 x 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n",  // unknown exit kind
		"mark 0 vcpu 0\n401000 5 0 rr 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n", // likewise
		"mark 0 vcpu 0\n401000 5 0 r 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n",  // more lookups than executions
		// and likewise over two sections, on vCPU 1
		"mark 0 vcpu 0\n401000 5 0 r 0 4 0 0 0 0 0 0 0 3 0 0 0 0 0 0\nmark 1 vcpu 0\n401000 5 0 r 0 2 0 0 0 0 0 0 0 4 0 0 0 0 0 0\n",
	} {
		if _, err := parseCounts(strings.NewReader(c)); err == nil {
			t.Errorf("%q: no error", c)
		}
	}
	secs, _ := parseCounts(strings.NewReader(testCounts))
	for _, c := range []string{"prog 0", "prog x", "prog", "a 1\nb 1\nc 1"} {
		if _, err := parseSections(c, secs); err == nil {
			t.Errorf("sections %q: no error", c)
		}
	}
	runs, _ := parseSections("p 300\np 100", secs)
	if _, _, err := pair(runs); err == nil {
		t.Error("fewer iterations in the later run: no error")
	}
}

// TestRun runs the command on files, with this test binary's own symbols
// (an ELF with function symbols) for -bin.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	counts, sections := filepath.Join(dir, "counts"), filepath.Join(dir, "sections")
	if err := os.WriteFile(counts, []byte(testCounts), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sections, []byte("prog test 100\nprog test 300\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"-counts", counts, "-sections", sections}, &out); err != nil {
		t.Fatal(err)
	}
	want := "prog test                    | vCPU0      20 +      5 [    150] | vCPU1       0 +      0 [      0] | work, all vCPUs      25 | blocks     2 +    1 | lookups     0 +    1 | atomics    2 +   0"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output:\n%s\nwant a line\n%s", out.String(), want)
	}
	// go test strips its binaries; a built command keeps its symbols.
	exe := filepath.Join(dir, "insncount")
	if b, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	syms, err := readSymbols(exe)
	if err != nil {
		t.Fatal(err)
	}
	if name := syms.lookup(syms.addrs[len(syms.addrs)/2]); name == "other" || name == "" {
		t.Errorf("a symbol's own address looks up as %q", name)
	}
	if name := syms.lookup(syms.end); name != "other" {
		t.Errorf("the end of the text looks up as %q", name)
	}
	// Labels that start with the binary's name list its functions' work:
	// here 401000, the start of Go's text, with 5 instructions per
	// iteration, 1 block looked up and no atomics.
	if err := os.WriteFile(sections, []byte("insncount test 100\ninsncount test 300\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run([]string{"-counts", counts, "-sections", sections, "-bin", exe, "-top", "3"}, &out); err != nil {
		t.Fatal(err)
	}
	if want := "\n          5   1.0  0.0  " + syms.lookup(0x401000) + "\n"; !strings.Contains(out.String(), want) {
		t.Errorf("output:\n%s\nwant a line %q", out.String(), want)
	}
	for _, args := range [][]string{
		{},
		{"-counts", counts},
		{"-counts", counts, "-sections", sections, "-vcpus", "9"},
		{"-counts", filepath.Join(dir, "none"), "-sections", sections},
		{"-counts", counts, "-sections", sections, "-bin", counts},
	} {
		if err := run(args, &out); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
