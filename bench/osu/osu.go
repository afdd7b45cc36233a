//go:build linux

// Package osu is Rivet's port of the OSU Micro-Benchmarks: the same
// measurements, options and output, byte for byte, as OSU 7.4's MPI
// benchmarks, run over a fabric communicator. Rank 0 prints.
package osu

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/progress"
)

// Version is the OSU Micro-Benchmarks release whose output this matches.
const Version = "7.4"

// Options are OSU's options for point-to-point benchmarks.
type Options struct {
	MinSize     int // -m MIN:
	MaxSize     int // -m :MAX
	Iterations  int // -i, messages up to 8 KiB
	Warmup      int // -x, messages up to 8 KiB
	IterLarge   int // -i, messages over 8 KiB
	WarmupLarge int // -x, messages over 8 KiB
	Window      int // -W, bandwidth tests

	// Percentiles (--percentiles, osu_latency only; Rivet's own option)
	// adds the median, 90th and 99th percentiles and the maximum of each
	// iteration's one-way latency (half its round trip) to each row. It
	// reads the clock every iteration, which OSU's loop does not.
	Percentiles bool

	// Decimals (--decimals, Rivet's own option) is how many decimals each
	// figure has; OSU prints 2, which leaves a slow link's bandwidth at
	// small sizes as 0.00. Zero means OSU's 2.
	Decimals int
}

// rank0Progress is the progress line of benchmark name on rank 0's
// standard error, shown when that is a terminal (package progress).
func rank0Progress(c *fabric.Comm, name string) *progress.Line {
	if c.Rank() != 0 {
		return nil
	}
	return progress.New(os.Stderr, name)
}

// largeMessage is OSU's LARGE_MESSAGE_SIZE: longer messages use the
// large iteration counts.
const largeMessage = 8192

// ErrUsage is wrapped by errors about a benchmark's arguments.
var ErrUsage = errors.New("osu: bad usage")

// Benchmark is one OSU benchmark.
type Benchmark struct {
	Name     string
	Title    string
	Defaults Options
	kind     int
}

const (
	kindLatency = iota
	kindBW
	kindBiBW
)

// Benchmarks are the point-to-point benchmarks Rivet has, by OSU name.
var Benchmarks = []Benchmark{
	{Name: "osu_latency", Title: "OSU MPI Latency Test", kind: kindLatency,
		Defaults: Options{MinSize: 0, MaxSize: 1 << 22, Iterations: 10000, Warmup: 100, IterLarge: 1000, WarmupLarge: 10}},
	{Name: "osu_bw", Title: "OSU MPI Bandwidth Test", kind: kindBW,
		Defaults: Options{MinSize: 1, MaxSize: 1 << 22, Iterations: 100, Warmup: 10, IterLarge: 20, WarmupLarge: 2, Window: 64}},
	{Name: "osu_bibw", Title: "OSU MPI Bi-Directional Bandwidth Test", kind: kindBiBW,
		Defaults: Options{MinSize: 1, MaxSize: 1 << 22, Iterations: 100, Warmup: 10, IterLarge: 20, WarmupLarge: 2, Window: 64}},
}

// Lookup finds a benchmark by OSU name.
func Lookup(name string) (Benchmark, bool) {
	for _, b := range Benchmarks {
		if b.Name == name {
			return b, true
		}
	}
	return Benchmark{}, false
}

// ParseArgs reads OSU's options for b: -m [MIN:]MAX, -i, -x, and -W for
// the bandwidth tests. As in OSU, -i and -x set the small- and the
// large-message counts alike.
func (b Benchmark) ParseArgs(args []string, stderr io.Writer) (Options, error) {
	o := b.Defaults
	fs, common := newFlags(b.Name, stderr, true)
	var win *int
	var pct *bool
	decimals := fs.Int("decimals", 2, "`digits` after the decimal point (OSU prints 2; not in OSU)")
	if b.kind != kindLatency {
		win = fs.Int("W", 0, "`messages` in flight per iteration (window size)")
	} else {
		pct = fs.Bool("percentiles", false, "also print percentiles of the per-iteration one-way latency (not in OSU)")
	}
	if err := common(args, &o); err != nil {
		return o, err
	}
	if pct != nil {
		o.Percentiles = *pct
	}
	if *decimals < 1 || *decimals > 9 {
		return o, fmt.Errorf("%w: --decimals %d: want 1 to 9", ErrUsage, *decimals)
	}
	o.Decimals = *decimals
	if win != nil && *win != 0 {
		if *win < 1 {
			return o, fmt.Errorf("%w: -W %d: the window must be at least 1", ErrUsage, *win)
		}
		o.Window = *win
	}
	return o, nil
}

// newFlags makes a benchmark's flag set with OSU's common options — -m
// (when sized), -i, -x, -v — and returns it with the function that parses
// args and applies those options to o. Add a benchmark's own flags to the
// set before calling it.
func newFlags(name string, stderr io.Writer, sized bool) (*flag.FlagSet, func(args []string, o *Options) error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sizes *string
	if sized {
		sizes = fs.String("m", "", "message sizes `[MIN:]MAX` in bytes (e.g. 128, 2:128, 2:)")
	}
	iters := fs.Int("i", 0, "timed `iterations` per message size")
	warm := fs.Int("x", -1, "warm-up `iterations` per message size")
	version := fs.Bool("v", false, "print the version")
	return fs, func(args []string, o *Options) error {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
		}
		if *version {
			return errVersion
		}
		if sizes != nil && *sizes != "" {
			lo, hi, err := parseSizes(*sizes, o.MinSize, o.MaxSize)
			if err != nil {
				return err
			}
			o.MinSize, o.MaxSize = lo, hi
		}
		if *iters < 0 {
			return fmt.Errorf("%w: -i %d: iterations must be positive", ErrUsage, *iters)
		}
		if *iters > 0 {
			o.Iterations, o.IterLarge = *iters, *iters
		}
		if *warm >= 0 {
			o.Warmup, o.WarmupLarge = *warm, *warm
		}
		return nil
	}
}

var errVersion = errors.New("version")

// IsVersion reports whether ParseArgs asked for the version only.
func IsVersion(err error) bool { return errors.Is(err, errVersion) }

func parseSizes(s string, lo, hi int) (int, int, error) {
	bad := fmt.Errorf("%w: -m %q is not of the form MAX, MIN:MAX or MIN: (byte counts)", ErrUsage, s)
	a, b, colon := strings.Cut(s, ":")
	var err error
	if !colon {
		if hi, err = strconv.Atoi(s); err != nil {
			return 0, 0, bad
		}
	} else {
		if a != "" {
			if lo, err = strconv.Atoi(a); err != nil {
				return 0, 0, bad
			}
		}
		if b != "" {
			if hi, err = strconv.Atoi(b); err != nil {
				return 0, 0, bad
			}
		}
	}
	if lo < 0 || hi < lo || hi > 1<<30 {
		return 0, 0, fmt.Errorf("%w: -m %q: sizes must satisfy 0 ≤ MIN ≤ MAX ≤ 1 GiB", ErrUsage, s)
	}
	return lo, hi, nil
}

// sizes lists the message sizes OSU visits: 0 (if in range), then powers
// of two from 1.
func (o Options) sizes() []int {
	var out []int
	if o.MinSize == 0 {
		out = append(out, 0)
	}
	for s := 1; s <= o.MaxSize; s *= 2 {
		if s >= o.MinSize {
			out = append(out, s)
		}
	}
	return out
}

func (o Options) counts(size int) (iters, warmup int) {
	if size > largeMessage {
		return o.IterLarge, o.WarmupLarge
	}
	return o.Iterations, o.Warmup
}

// Header writes OSU's preamble for b, with the percentile columns when o
// asks for them.
func (b Benchmark) Header(w io.Writer, o Options) {
	col := "Avg Latency(us)"
	if b.kind != kindLatency {
		col = "Bandwidth (MB/s)"
	}
	fmt.Fprintf(w, "\n# %s v%s\n# Datatype: MPI_CHAR.\n%-*s%*s", b.Title, Version, 10, "# Size", fieldWidth, col)
	if o.Percentiles && b.kind == kindLatency {
		for _, c := range percentileCols {
			fmt.Fprintf(w, "%*s", fieldWidth, c)
		}
	}
	fmt.Fprintln(w)
}

// fieldWidth is the width of OSU 7.4's point-to-point value columns.
const fieldWidth = 18

func row(w io.Writer, decimals, size int, v float64, more ...float64) {
	if decimals == 0 {
		decimals = 2
	}
	fmt.Fprintf(w, "%-*d%*.*f", 10, size, fieldWidth, decimals, v)
	for _, m := range more {
		fmt.Fprintf(w, "%*.*f", fieldWidth, decimals, m)
	}
	fmt.Fprintln(w)
}
