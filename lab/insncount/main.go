// Command insncount turns the counts the insncount QEMU plugin
// (lab/qemu/insncount.c) wrote during lab/insncount.sh into guest
// instructions per benchmark iteration, for each vCPU, split into the
// kernel's, the program's own work and its polling.
//
// Timing under TCG on this project's host drifts by up to 2× for seconds
// at a time, more than the 5% the speed targets ask to resolve.
// Instruction counts do not drift: they say exactly how much work two
// programs do per iteration, though not what each instruction costs.
//
//	insncount -counts FILE -sections FILE [-bin ELF] [-top N]
//
// The sections file has a line "label iterations" for each marked run, in
// the order run; the plugin's mark k ends section k. Each label names a
// program and a test ("rivet write_lat 4096"); runs of one label with two
// iteration counts are subtracted, so start-up and tear-down cancel, and
// the difference is divided by the difference in iterations.
//
// A block (the plugin's unit: a straight run of guest code) counts as
// polling when it ran more than -poll times per iteration on any vCPU: a
// wait loop's blocks run once per look at the queue, the work's a few
// times per message. The split is approximate — a wait loop's rarer
// blocks (a look at the context every 16 polls) can pass for work — so
// compare programs by their totals, and a function's work by -top. Kernel
// blocks are all counted as work: the kernel does not poll in these tests
// (an idle vCPU halts, which counts nothing), and its copy and checksum
// loops run many times per message.
//
// Instructions are not all alike under TCG. Besides them, the command
// reports per iteration the blocks executed, the lookups (block
// transitions TCG could not chain, so that it called into QEMU to find
// the next block: every return, every indirect branch, every jump or call
// to another page) and the atomic read-modify-writes, each a call into
// QEMU too. lab/qemu/tcgcost.c times each of these in the guest; with
// its figures the counts become an estimate of time that the host's
// speed does not move (docs/performance.md).
package main

import (
	"bufio"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "insncount:", err)
		os.Exit(1)
	}
}

// kernelBase is where x86-64 Linux puts kernel addresses.
const kernelBase = 0xffff800000000000

// maxVCPUs is how many per-vCPU columns the plugin writes.
const maxVCPUs = 8

// blockKey names a block: its address, length, how many of its
// instructions are atomic read-modify-writes, and how it ends (the
// plugin's exit_kind).
type blockKey struct {
	pc, n, atomics uint64
	exit           byte
}

// exitKinds are the plugin's exit codes (exit_kind in
// lab/qemu/insncount.c): a return, an indirect branch, a system
// instruction, a direct call, jump or conditional branch, or none; upper
// case where a target is on another page.
const exitKinds = "rischCjJbBoO"

// A block's counts: executions on vCPU v at [v], and at [maxVCPUs+v] how
// many of them ended in a lookup — TCG could not chain the block to the
// one that followed, and called into QEMU to find it. Under TCG a lookup
// costs about as much as a dozen plain instructions (docs/performance.md);
// every return is one, and so is every call or jump to another page.
type counts[T uint64 | float64] [2 * maxVCPUs]T

// section is one marked run: the counts of every block.
type section map[blockKey]counts[uint64]

type run1 struct {
	label string
	iters int
	sec   section
}

// perIter is the difference of two runs, per iteration: each block's
// counts.
type perIter map[blockKey]counts[float64]

// split is one vCPU's instructions per iteration.
type split struct {
	kernel, work, poll float64
	// Atomic read-modify-writes, which multi-threaded TCG runs as calls
	// into QEMU: in the kernel's blocks and in the work's.
	kernelAtomics, workAtomics float64
	// Blocks executed, and those of them whose successor TCG looks up.
	kernelBlocks, workBlocks   float64
	kernelLookups, workLookups float64
}

func (s split) total() float64 { return s.kernel + s.work }

func (s *split) add(t split) {
	s.kernel += t.kernel
	s.work += t.work
	s.poll += t.poll
	s.kernelAtomics += t.kernelAtomics
	s.workAtomics += t.workAtomics
	s.kernelBlocks += t.kernelBlocks
	s.workBlocks += t.workBlocks
	s.kernelLookups += t.kernelLookups
	s.workLookups += t.workLookups
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("insncount", flag.ContinueOnError)
	countsPath := fs.String("counts", "", "the plugin's output `file`")
	sectionsPath := fs.String("sections", "", "the `file` naming each marked run: label and iterations")
	var bins []string
	fs.Func("bin", "an ELF `binary` (non-PIE, as Go builds by default) whose symbols name the work of the labels that start with its base name (repeatable)", func(s string) error {
		bins = append(bins, s)
		return nil
	})
	top := fs.Int("top", 0, "list the `N` functions of -bin with the most work per iteration")
	pollMin := fs.Float64("poll", 8, "a user block run more than this many times per iteration is polling")
	vcpus := fs.Int("vcpus", 2, "vCPUs to report")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *countsPath == "" || *sectionsPath == "" {
		return errors.New("-counts and -sections are required")
	}
	if *vcpus < 1 || *vcpus > maxVCPUs {
		return fmt.Errorf("-vcpus must be 1..%d", maxVCPUs)
	}
	secs, err := readCounts(*countsPath)
	if err != nil {
		return err
	}
	runs, err := readSections(*sectionsPath, secs)
	if err != nil {
		return err
	}
	var tabs []*symtab
	for _, b := range bins {
		t, err := readSymbols(b)
		if err != nil {
			return err
		}
		tabs = append(tabs, t)
	}
	labels, diffs, err := pair(runs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "guest instructions per iteration (per vCPU: %s; all vCPUs, kernel + work: blocks, lookups, atomic read-modify-writes)\n", strings.Repeat("kernel + work [polling] | ", *vcpus))
	for i, l := range labels {
		d := diffs[i]
		fmt.Fprintf(out, "%-28s", l)
		var all split
		for v := 0; v < *vcpus; v++ {
			s := d.split(v, *pollMin)
			all.add(s)
			fmt.Fprintf(out, " | vCPU%d %7.0f + %6.0f [%7.0f]", v, s.kernel, s.work, s.poll)
		}
		fmt.Fprintf(out, " | work, all vCPUs %7.0f | blocks %5.0f + %4.0f | lookups %5.0f + %4.0f | atomics %4.0f + %3.0f\n",
			all.total(), all.kernelBlocks, all.workBlocks, all.kernelLookups, all.workLookups, all.kernelAtomics, all.workAtomics)
		var syms *symtab
		for _, t := range tabs {
			if strings.HasPrefix(l, t.name+" ") {
				syms = t
			}
		}
		if syms != nil {
			o := d.own(syms, *pollMin, *vcpus)
			fmt.Fprintf(out, "    own: %.0f instructions, %.1f atomics, %.0f blocks, %.0f lookups\n", o.n, o.atomic, o.blocks, o.lookups)
		}
		if syms != nil && *top > 0 && strings.HasPrefix(l, syms.name+" ") {
			for _, f := range d.byFunc(syms, *pollMin, *vcpus, *top) {
				fmt.Fprintf(out, "    %7.0f %5.1f %4.1f  %s\n", f.n, f.lookups, f.atomic, f.name)
			}
		}
	}
	return nil
}

// readCounts parses the plugin's output into sections: section k holds
// what ran before mark k (the lines under the plugin's "mark k").
func readCounts(path string) ([]section, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseCounts(f)
}

func parseCounts(r io.Reader) ([]section, error) {
	var secs []section
	var cur section
	total := section{} // every section's counts summed
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		t := sc.Text()
		if strings.HasPrefix(t, "mark ") {
			cur = section{}
			secs = append(secs, cur)
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("counts line %d: counts before the first mark", line)
		}
		f := strings.Fields(t)
		if len(f) != 4+2*maxVCPUs {
			return nil, fmt.Errorf("counts line %d: %d fields, want %d: %q", line, len(f), 4+2*maxVCPUs, t)
		}
		pc, err1 := strconv.ParseUint(f[0], 16, 64)
		n, err2 := strconv.ParseUint(f[1], 10, 64)
		a, err3 := strconv.ParseUint(f[2], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("counts line %d: %w", line, err)
		}
		if a > n {
			return nil, fmt.Errorf("counts line %d: %d atomics in a block of %d instructions", line, a, n)
		}
		if len(f[3]) != 1 || !strings.Contains(exitKinds, f[3]) {
			return nil, fmt.Errorf("counts line %d: exit kind %q", line, f[3])
		}
		var c counts[uint64]
		for i, s := range f[4:] {
			if c[i], err1 = strconv.ParseUint(s, 10, 64); err1 != nil {
				return nil, fmt.Errorf("counts line %d: %w", line, err1)
			}
		}
		// A lookup is counted when the next block starts, after the
		// execution it ends; but a mark takes its snapshot while the other
		// vCPUs run on, so a section may hold the lookups of executions
		// the section before counted (those that ran between the
		// snapshot's reads of the two). Over the sections so far, none is
		// missing its execution.
		k := blockKey{pc, n, a, f[3][0]}
		sum := total[k]
		for v := 0; v < maxVCPUs; v++ {
			sum[v] += c[v]
			sum[maxVCPUs+v] += c[maxVCPUs+v]
			if sum[maxVCPUs+v] > sum[v] {
				return nil, fmt.Errorf("counts line %d: vCPU %d: %d lookups after %d executions, over the sections so far", line, v, sum[maxVCPUs+v], sum[v])
			}
		}
		total[k] = sum
		cur[k] = c
	}
	return secs, sc.Err()
}

// readSections pairs each line of the sections file with its section.
func readSections(path string, secs []section) ([]run1, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseSections(string(b), secs)
}

func parseSections(text string, secs []section) ([]run1, error) {
	var runs []run1
	for i, l := range strings.Split(strings.TrimSpace(text), "\n") {
		k := strings.LastIndexByte(l, ' ')
		if k < 0 {
			return nil, fmt.Errorf("sections line %d: %q is not \"label iterations\"", i+1, l)
		}
		n, err := strconv.Atoi(l[k+1:])
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("sections line %d: bad iteration count %q", i+1, l[k+1:])
		}
		// Mark 0 starts the first run, so run i is section 2i+1 when each
		// run is marked before and after.
		s := 2*i + 1
		if s >= len(secs) {
			return nil, fmt.Errorf("sections line %d: the counts have only %d marks", i+1, len(secs))
		}
		runs = append(runs, run1{label: strings.TrimSpace(l[:k]), iters: n, sec: secs[s]})
	}
	return runs, nil
}

// pair subtracts, for each label, its first run from its last, which must
// have more iterations.
func pair(runs []run1) ([]string, []perIter, error) {
	var labels []string
	first, last := map[string]run1{}, map[string]run1{}
	for _, r := range runs {
		if _, ok := first[r.label]; !ok {
			first[r.label] = r
			labels = append(labels, r.label)
		}
		last[r.label] = r
	}
	diffs := make([]perIter, len(labels))
	for i, l := range labels {
		a, b := first[l], last[l]
		if b.iters <= a.iters {
			return nil, nil, fmt.Errorf("%s: needs a run with more iterations after its first (%d, then %d)", l, a.iters, b.iters)
		}
		diffs[i] = diff(a.sec, b.sec, float64(b.iters-a.iters))
	}
	return labels, diffs, nil
}

func diff(a, b section, n float64) perIter {
	d := perIter{}
	for k, cb := range b {
		ca := a[k]
		var x counts[float64]
		for v := range x {
			x[v] = (float64(cb[v]) - float64(ca[v])) / n
		}
		d[k] = x
	}
	for k, ca := range a {
		if _, ok := b[k]; !ok {
			var x counts[float64]
			for v := range x {
				x[v] = -float64(ca[v]) / n
			}
			d[k] = x
		}
	}
	return d
}

// split sums vCPU v's instructions per iteration.
func (d perIter) split(v int, pollMin float64) split {
	var s split
	for k, c := range d {
		ins, atom, look := c[v]*float64(k.n), c[v]*float64(k.atomics), c[maxVCPUs+v]
		switch {
		case k.pc >= kernelBase:
			s.kernel += ins
			s.kernelAtomics += atom
			s.kernelBlocks += c[v]
			s.kernelLookups += look
		case polling(c, pollMin):
			s.poll += ins
		default:
			s.work += ins
			s.workAtomics += atom
			s.workBlocks += c[v]
			s.workLookups += look
		}
	}
	return s
}

// polling reports whether a block with counts c polls: it ran more than
// pollMin times per iteration on some vCPU — the two sides of a
// ping-pong run the same code, but one may wait longer than the other.
// A block run far less in the longer run counts too: a wait before the
// loop (for the peer to start) that varies from run to run.
func polling(c counts[float64], pollMin float64) bool {
	for _, x := range c[:maxVCPUs] {
		if math.Abs(x) > pollMin {
			return true
		}
	}
	return false
}

type funcWork struct {
	name            string
	n               float64 // instructions
	lookups, atomic float64
	blocks          float64
}

// own sums, over vCPUs, the user work per iteration of the blocks inside
// syms' binary: the program's own, wherever it ran. A peer that runs
// the same program from a copy linked at another address (lab/
// insncount.sh links the target rank's so) is not counted.
func (d perIter) own(syms *symtab, pollMin float64, vcpus int) funcWork {
	var f funcWork
	for k, c := range d {
		if !syms.holds(k.pc) || polling(c, pollMin) {
			continue
		}
		for v := 0; v < vcpus; v++ {
			f.n += c[v] * float64(k.n)
			f.atomic += c[v] * float64(k.atomics)
			f.blocks += c[v]
			f.lookups += c[maxVCPUs+v]
		}
	}
	return f
}

// byFunc lists the functions of syms with the most user work per
// iteration, summed over vCPUs.
func (d perIter) byFunc(syms *symtab, pollMin float64, vcpus, top int) []funcWork {
	m := map[string]*funcWork{}
	for k, c := range d {
		if !syms.holds(k.pc) {
			continue
		}
		if polling(c, pollMin) {
			continue
		}
		name := syms.lookup(k.pc)
		f := m[name]
		if f == nil {
			f = &funcWork{name: name}
			m[name] = f
		}
		for v := 0; v < vcpus; v++ {
			f.n += c[v] * float64(k.n)
			f.atomic += c[v] * float64(k.atomics)
			f.lookups += c[maxVCPUs+v]
		}
	}
	var fs []funcWork
	for _, f := range m {
		fs = append(fs, *f)
	}
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].n != fs[j].n {
			return fs[i].n > fs[j].n
		}
		return fs[i].name < fs[j].name
	})
	if len(fs) > top {
		fs = fs[:top]
	}
	return fs
}

type symtab struct {
	name  string // the binary's base name
	addrs []uint64
	names []string
	end   uint64
}

func readSymbols(path string) (*symtab, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	type sym struct {
		a uint64
		n string
	}
	var ss []sym
	t := &symtab{name: path[strings.LastIndexByte(path, '/')+1:]}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			ss = append(ss, sym{s.Value, s.Name})
			t.end = max(t.end, s.Value+s.Size)
		}
	}
	if len(ss) == 0 {
		return nil, fmt.Errorf("%s: no function symbols", path)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].a < ss[j].a })
	for _, s := range ss {
		t.addrs = append(t.addrs, s.a)
		t.names = append(t.names, s.n)
	}
	return t, nil
}

// holds reports whether pc is in the binary's functions.
func (t *symtab) holds(pc uint64) bool { return pc >= t.addrs[0] && pc < t.end }

// lookup names the function holding pc; code outside the binary (the
// vDSO, other mappings) is "other".
func (t *symtab) lookup(pc uint64) string {
	i := sort.Search(len(t.addrs), func(i int) bool { return t.addrs[i] > pc }) - 1
	if i < 0 || pc >= t.end {
		return "other"
	}
	return t.names[i]
}
