//go:build linux

// Command hostspeed shows how fast the machine it runs on executes a fixed
// piece of memory-bound work, window by window. It is the control for the
// benchmarks in docs/performance.md: run on the CI host, or in the rxevm
// guest, it shows spells of up to 2–2.5× slower execution that come and go
// within seconds, with no RDMA, no system calls and no other program in
// the loop — so a benchmark run's median is partly a matter of which
// spells it met.
//
//	go run -C lab ./hostspeed -cpu 1 -mem 512MiB -d 20s
//
// Each line is one window: its mean time per unit of work over the
// fastest window's. The last line gives the share of windows at 1.5× or
// more.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hostspeed:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("hostspeed", flag.ContinueOnError)
	cpu := fs.Int("cpu", -1, "pin to this `CPU` (-1: do not pin)")
	memSize := fs.String("mem", "512MiB", "working set `size` (KiB, MiB or GiB suffix)")
	dur := fs.Duration("d", 20*time.Second, "how long to run")
	win := fs.Duration("window", 500*time.Millisecond, "window length")
	if err := fs.Parse(args); err != nil {
		return err
	}
	n, err := parseSize(*memSize)
	if err != nil {
		return err
	}
	if *dur <= 0 || *win <= 0 || *win > *dur {
		return errors.New("-d and -window must be positive, and -window no longer than -d")
	}
	runtime.LockOSThread()
	if *cpu >= 0 {
		var set unix.CPUSet
		set.Set(*cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pinning to CPU %d: %w", *cpu, err)
		}
	}
	mem := make([]uint64, n/8)
	for i := range mem { // fault it in before timing
		mem[i] = uint64(i)
	}
	rel := relative(measure(mem, *dur, *win))
	fmt.Fprintf(out, "# %d windows of %v, %s working set; each window's time per unit over the fastest's\n", len(rel), *win, *memSize)
	for i, r := range rel {
		fmt.Fprintf(out, "%d %.2f\n", i, r)
	}
	fmt.Fprintf(out, "# windows at 1.5x or more: %.0f%%\n", 100*slowShare(rel, 1.5))
	return nil
}

// unit is one piece of work: pseudo-random read-modify-writes over mem,
// so that the time goes to memory and address translation, as it does for
// an emulated guest.
func unit(mem []uint64, x uint64) uint64 {
	mask := uint64(len(mem) - 1)
	for i := 0; i < 1<<16; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		mem[(x>>20)&mask] += x
	}
	return x
}

// measure runs units for d and returns each window's mean time per unit.
func measure(mem []uint64, d, window time.Duration) []time.Duration {
	var means []time.Duration
	x := uint64(1)
	end := time.Now().Add(d)
	for {
		start := time.Now()
		if !start.Before(end) {
			return means
		}
		units := 0
		for time.Since(start) < window {
			x = unit(mem, x)
			units++
		}
		means = append(means, time.Since(start)/time.Duration(units))
	}
}

// relative divides each window's mean by the fastest window's.
func relative(means []time.Duration) []float64 {
	if len(means) == 0 {
		return nil
	}
	fastest := means[0]
	for _, m := range means {
		fastest = min(fastest, m)
	}
	r := make([]float64, len(means))
	for i, m := range means {
		r[i] = float64(m) / float64(fastest)
	}
	return r
}

// slowShare is the fraction of windows at threshold × the fastest or more.
func slowShare(rel []float64, threshold float64) float64 {
	if len(rel) == 0 {
		return 0
	}
	n := 0
	for _, r := range rel {
		if r >= threshold {
			n++
		}
	}
	return float64(n) / float64(len(rel))
}

// parseSize reads a size such as 4096, 64KiB, 512MiB or 1GiB; it must be a
// power of two of at least 8 bytes, so that a mask picks a word.
func parseSize(arg string) (int, error) {
	s, mult := arg, 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("-mem %q: want a size such as 64KiB or 512MiB", arg)
	}
	n := v * mult
	if n < 8 || n&(n-1) != 0 {
		return 0, fmt.Errorf("-mem %q: %d bytes is not a power of two of 8 or more", arg, n)
	}
	return n, nil
}
