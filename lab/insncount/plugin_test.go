package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// loopText is where the loop program's code is linked.
const loopText = 0x20000000

// loopProgram is a static program whose only loop, run K times, is five
// instructions in three blocks: a call (chained to its target), a return
// (whose successor TCG looks up), and an atomic read-modify-write with the
// loop's branch (chained). The plugin must count exactly that.
const loopProgram = `void _start(void)
{
	__asm__ volatile("mov %0, %%rcx\n"
			 "1:\tcall 2f\n\tlock incl (%%rsp)\n\tdec %%rcx\n\tjnz 1b\n"
			 "\tmov $60, %%eax\n\txor %%edi, %%edi\n\tsyscall\n"
			 "2:\tret"
			 :: "i"(K) : "rcx", "memory");
	__builtin_unreachable();
}
`

// TestPluginInVM builds the plugin and the marker program, boots an rxevm
// guest with them (no RDMA needed), and counts a three-instruction loop
// run 1000 and then 11 000 times: per iteration, exactly 5 instructions of
// work in 3 blocks, 1 of them atomic and 1 block looked up, and next to
// nothing in the kernel. It boots a VM, about 10 s.
func TestPluginInVM(t *testing.T) {
	testutil.RequireVM(t)
	gcc := testutil.LookTool(t, "gcc", "gcc")
	dir := t.TempDir() // under /tmp, which the guest sees
	for _, b := range [][]string{
		{"-O2", "-Wall", "-shared", "-fPIC", "-fvisibility=hidden", "-o", filepath.Join(dir, "insncount.so"), "../qemu/insncount.c"},
		{"-O2", "-static", "-nostdlib", "-fno-pie", "-no-pie", "-Wl,--section-start=.text=0x13370000", "-o", filepath.Join(dir, "mark"), "../qemu/mark.c"},
	} {
		if out, err := exec.Command(gcc, b...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %q: %v\n%s", b, err, out)
		}
	}
	src := filepath.Join(dir, "loop.c")
	if err := os.WriteFile(src, []byte(loopProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1000, 11000} {
		// Linked apart from the guest's own programs (its Go agent sits at
		// Go's usual 0x400000), so its blocks can be picked out.
		out, err := exec.Command(gcc, "-O2", "-static", "-nostdlib", "-fno-pie", "-no-pie", fmt.Sprintf("-DK=%d", k),
			"-Wl,--section-start=.text="+fmt.Sprintf("%#x", loopText),
			"-o", filepath.Join(dir, fmt.Sprint("loop", k)), src).CombinedOutput()
		if err != nil {
			t.Fatalf("gcc loop.c: %v\n%s", err, out)
		}
	}
	rxevm := filepath.Join(dir, "rxevm")
	build := exec.Command("go", "build", "-C", "../..", "-o", rxevm, "./cmd/rxevm")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rxevm: %v\n%s", err, out)
	}
	counts := filepath.Join(dir, "counts")
	wrapper := filepath.Join(dir, "qemu")
	if err := os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\nexec qemu-system-x86_64 \"$@\" -plugin %s/insncount.so,out=%s\n", dir, counts)), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("%[1]s/mark; %[1]s/loop1000; %[1]s/mark; %[1]s/mark; %[1]s/loop11000; %[1]s/mark", dir)
	// Room for rxevm to boot again a guest that has not started the
	// command within its start timeout (3 minutes; a run takes 10 s): a
	// run bound of 3 minutes, as before, killed such a guest with the
	// second boot never tried (a fresh clone's CI, once).
	if out, err := exec.Command(rxevm, "-q", "-topology", "none", "-qemu", wrapper, "-timeout", "7m", "sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("rxevm: %v\n%s", err, out)
	}
	secs, err := readCounts(counts)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := parseSections("loop 1000\nloop 11000", secs)
	if err != nil {
		t.Fatal(err)
	}
	_, diffs, err := pair(runs)
	if err != nil {
		t.Fatal(err)
	}
	var work, kernel, atomics, blocks, lookups float64
	for k, c := range diffs[0] {
		for v := 0; v < 2; v++ {
			switch {
			case k.pc >= loopText && k.pc < loopText+0x1000:
				work += c[v] * float64(k.n)
				atomics += c[v] * float64(k.atomics)
				blocks += c[v]
				lookups += c[maxVCPUs+v]
			case k.pc >= kernelBase:
				kernel += c[v] * float64(k.n)
			}
		}
	}
	// The loop is three blocks; the rest of the program (start, exit) is
	// the same in both runs and cancels. The
	// kernel's count is what differs between the runs' windows: exec and
	// exit cancel, background (a timer tick, the guest agent) does not,
	// and over 10 000 iterations a stray burst still reads as little.
	t.Logf("per iteration: %.4f user instructions (%.4f atomic) in %.4f blocks (%.4f looked up), %.1f kernel instructions",
		work, atomics, blocks, lookups, kernel)
	if math.Abs(work-5) > 0.01 {
		t.Errorf("user instructions per iteration %.4f, want 5", work)
	}
	if math.Abs(blocks-3) > 0.01 || math.Abs(lookups-1) > 0.01 {
		t.Errorf("user blocks per iteration %.4f (%.4f looked up), want 3 (1: the return)", blocks, lookups)
	}
	if math.Abs(atomics-1) > 0.01 {
		t.Errorf("atomic instructions per iteration %.4f, want 1", atomics)
	}
	if math.Abs(kernel) > 1000 {
		t.Errorf("kernel instructions per iteration %.1f, want about 0", kernel)
	}
}

// TestTCGCostRuns builds lab/qemu/tcgcost.c and runs it on the host
// (its figures mean something only in the guest): it must report all six
// units with a number each.
func TestTCGCostRuns(t *testing.T) {
	exe := buildStatic(t, "tcgcost")
	out, err := exec.Command(exe).CombinedOutput()
	if err != nil {
		t.Fatalf("tcgcost: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 7 {
		t.Fatalf("tcgcost printed %d lines, want a header and 6 units:\n%s", len(lines), out)
	}
	for _, l := range lines[1:] {
		var v float64
		if _, err := fmt.Sscanf(l, "%f", &v); err != nil || math.IsNaN(v) {
			t.Errorf("line %q: no figure", l)
		}
	}
}

// TestSleeperBuilds compiles lab/qemu/sleeper.c, which
// lab/timer-wakes.sh runs in the guest.
func TestSleeperBuilds(t *testing.T) { buildStatic(t, "sleeper") }

// buildStatic compiles lab/qemu/name.c into a static program, warnings
// as errors, and returns its path.
func buildStatic(t *testing.T, name string) string {
	t.Helper()
	gcc := testutil.LookTool(t, "gcc", "gcc")
	exe := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command(gcc, "-O2", "-Wall", "-Werror", "-static", "-o", exe, "../qemu/"+name+".c").CombinedOutput(); err != nil {
		t.Fatalf("gcc %s.c: %v\n%s", name, err, out)
	}
	return exe
}
