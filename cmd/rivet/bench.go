//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/rivet-hpc/rivet/bench/ftbench"
	"github.com/rivet-hpc/rivet/bench/iobench"
	"github.com/rivet-hpc/rivet/bench/osu"
	"github.com/rivet-hpc/rivet/bench/results"
	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/internal/godebug"
	"github.com/rivet-hpc/rivet/internal/launch"
	"github.com/rivet-hpc/rivet/internal/progress"
	"github.com/rivet-hpc/rivet/internal/sysmon"
)

const benchUsage = `usage: rivet bench [-np N] [TEST|all] [OSU options]

Runs OSU Micro-Benchmarks 7.4 tests over the Rivet fabric, printing exactly
what OSU prints. Under a launcher (rivetrun, mpiexec.hydra, srun) it runs in
the job it was started in; started on its own it launches N ranks on this
node first (shared memory). With no test name (or "all") it runs the
point-to-point tests.

Tests: %s, osu_init (how long fabric.Init takes, as OSU's start-up test),
ft_detect (see rivet bench ft_detect -h),
ft_respawn (spawn 1 and N, and each step of a recovery to full size: -rounds),
ft_recover (agree, iagree, shrink and revoke, beside barrier, allreduce 4 B and
comm dup; -i ITER -x WARMUP; -failure adds shrink after the last rank dies),
io (IOR's patterns over package files: -b BLOCK -t XFER -s SEGMENTS -F -c -V
-o PATH -i REPS -w -r -k -cb enable|disable|automatic -aggs N -cbsize BYTES)

OSU options: -m [MIN:]MAX  -i ITER  -x WARMUP  -W WINDOW (bandwidth)
             -f (collectives: min, max, iterations)  -t CALLS (osu_i*)  -v
             -w create|allocate|dynamic  -s lock|flush|flush_local|lock_all|pscw|fence
             -T mpi_char|mpi_int|mpi_float|all|mpi_long (acc, fop, cas)  (one-sided)

Flags:
`

// benchChildEnv marks processes that rivet bench launched itself, so they
// never launch again.
const benchChildEnv = "RIVET_BENCH_CHILD"

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("rivet bench", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintf(stderr, benchUsage, osu.Names()); fs.PrintDefaults() }
	np := fs.Int("np", 2, "ranks to launch when not started by a launcher")
	detector := fs.Bool("detector", false, "run ft's failure detector in every rank throughout (to measure its cost)")
	bindTo := fs.String("bind-to", "auto", "with -np, pin rank r to CPU r mod NumCPU: `core`, none, or auto (core when N ≤ CPUs), as rivetrun")
	format := fs.String("format", "text", "output: `text` (OSU's, byte for byte), json or csv (package bench/results' forms, for rivet plot and dashboards)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *format != "text" {
		encode, ok := map[string]func(io.Writer, []results.Table) error{"json": results.WriteJSON, "csv": results.WriteCSV}[*format]
		if !ok || fs.Arg(0) == "io" {
			fmt.Fprintf(stderr, "rivet bench: -format %q: text, json or csv (io prints IOR's summary, text only)\n", *format)
			return errUsage
		}
		// The tests print OSU's text; it becomes the other form at the
		// end. (Ranks that print nothing print nothing; a parent that
		// launched the ranks converts what rank 0 converted, unchanged.)
		var text bytes.Buffer
		out := stdout
		stdout = &text
		defer func() {
			if err != nil || text.Len() == 0 {
				return
			}
			tables, perr := results.Parse(&text, "rivet bench "+fs.Arg(0))
			if perr == nil {
				perr = encode(out, tables)
			}
			err = perr
		}()
	}
	bind, err := launch.ParseBinding(*bindTo)
	if err != nil {
		fmt.Fprintln(stderr, "rivet bench:", err)
		return errUsage
	}
	rest := fs.Args()
	var runs []func(ctx context.Context, w *fabric.Comm) error
	var initTook time.Duration // fabric.Init's, for osu_init
	failure := false           // a rank will die: the job must tolerate it
	name := "all"
	if len(rest) > 0 {
		name, rest = rest[0], rest[1:]
	}
	if name == "ft_detect" {
		return ftDetectCmd(ctx, *np, bind, rest, stdout, stderr)
	}
	universe := 0 // the launcher's universe size, 0 for the job's
	if name == "ft_respawn" {
		rs := flag.NewFlagSet("rivet bench ft_respawn", flag.ContinueOnError)
		var o ftbench.RespawnOptions
		rs.IntVar(&o.Rounds, "rounds", 5, "rounds of each measurement")
		if err := parseFlags(rs, rest, stderr); err != nil {
			return err
		}
		if o.Rounds < 1 || rs.NArg() > 0 {
			fmt.Fprintf(stderr, "rivet bench ft_respawn: -rounds %d (1 or more), arguments %q\n", o.Rounds, rs.Args())
			return errUsage
		}
		failure, universe = true, ftbench.RespawnUniverse(*np, o.Rounds)
		o.Args = append([]string{"bench"}, args...) // a spawned process runs the same
		runs = append(runs, func(ctx context.Context, w *fabric.Comm) error { return ftbench.Respawn(ctx, w.Endpoint(), o, stdout) })
	} else if name == "ft_recover" {
		rs := flag.NewFlagSet("rivet bench ft_recover", flag.ContinueOnError)
		var o ftbench.RecoverOptions
		rs.IntVar(&o.Iters, "i", 1000, "timed iterations of each operation")
		rs.IntVar(&o.Warmup, "x", 100, "untimed iterations first")
		rs.BoolVar(&o.Failure, "failure", false, "then kill the last rank and time shrink after its failure")
		if err := parseFlags(rs, rest, stderr); err != nil {
			return err
		}
		failure = o.Failure
		if o.Iters < 1 || o.Warmup < 0 || rs.NArg() > 0 {
			fmt.Fprintf(stderr, "rivet bench ft_recover: -i %d (1 or more), -x %d (0 or more), arguments %q\n", o.Iters, o.Warmup, rs.Args())
			return errUsage
		}
		runs = append(runs, func(ctx context.Context, w *fabric.Comm) error { return ftbench.Recover(ctx, w, o, stdout) })
	} else if name == osu.InitName {
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "rivet bench %s takes no options (it times fabric.Init), not %q\n", name, rest)
			return errUsage
		}
		runs = append(runs, func(ctx context.Context, w *fabric.Comm) error { return osu.RunInit(ctx, w, initTook, stdout) })
	} else if name == "io" {
		o, err := iobench.Parse(rest, stderr)
		if err != nil {
			if !errors.Is(err, flag.ErrHelp) {
				fmt.Fprintln(stderr, err)
			}
			return errUsage
		}
		runs = append(runs, func(ctx context.Context, w *fabric.Comm) error { return iobench.Run(ctx, w, o, stdout) })
	} else if one, ok := osu.LookupOneSided(name); ok {
		o, err := one.ParseArgs(rest, stderr)
		if err := benchArgErr(err, stdout, stderr, one.Title); err != nil {
			return ignoreVersion(err)
		}
		runs = append(runs, func(ctx context.Context, w *fabric.Comm) error { return one.Run(ctx, w, o, stdout) })
	} else if coll, ok := osu.LookupCollective(name); ok {
		o, err := coll.ParseArgs(rest, stderr)
		if err := benchArgErr(err, stdout, stderr, coll.Title); err != nil {
			return ignoreVersion(err)
		}
		runs = append(runs, func(ctx context.Context, w *fabric.Comm) error { return coll.Run(ctx, w, o, stdout) })
	} else {
		tests := osu.Benchmarks
		if name != "all" {
			b, ok := osu.Lookup(name)
			if !ok {
				fmt.Fprintf(stderr, "rivet bench: no benchmark %q\n"+benchUsage, name, osu.Names())
				return errUsage
			}
			tests = []osu.Benchmark{b}
		}
		for _, b := range tests {
			o, err := b.ParseArgs(rest, stderr)
			if err := benchArgErr(err, stdout, stderr, b.Title); err != nil {
				return ignoreVersion(err)
			}
			runs = append(runs, func(ctx context.Context, w *fabric.Comm) error { return b.Run(ctx, w, o, stdout) })
		}
	}

	if err := collectives.ForceFromEnv(); err != nil {
		fmt.Fprintln(stderr, "rivet bench:", err)
		return errUsage
	}
	initStart := time.Now()
	ep, err := fabric.Init(ctx, fabric.WithProcessTuning(true))
	initTook = time.Since(initStart)
	if err != nil {
		return err
	}
	defer ep.Close()
	w := ep.World()
	if w.Size() == 1 && os.Getenv(benchChildEnv) == "" && !(name == "io" && *np == 1) {
		if *np < 2 {
			return fmt.Errorf("bench: -np %d: the tests need two ranks (io can run on one)", *np)
		}
		ep.Close()
		self, err := os.Executable()
		if err != nil {
			return err
		}
		// With -failure a rank dies on purpose: the survivors decide.
		st := launch.Run(ctx, launch.Options{N: *np, FT: failure, ExpectFailures: failure, Bind: bind, Env: []string{benchChildEnv + "=1"},
			Universe: universe, Stdout: stdout, Stderr: stderr}, append([]string{self, "bench"}, args...))
		if st != 0 {
			return fmt.Errorf("bench: the job exited with status %d", st)
		}
		return nil
	}
	if *detector {
		d, err := ft.Start(ctx, ep, ft.Options{})
		if err != nil {
			return err
		}
		defer d.Stop()
	}
	if w.Rank() == 0 && ep.Parent() == nil && w.Size() > 1 {
		over := ep.Provider(1)
		if over == "verbs" {
			over += " (" + ep.Device() + ")"
		}
		fmt.Fprintf(stderr, "# rivet: %d ranks (%s); rank 1 over %s; async preemption %s; sysmon %s\n",
			w.Size(), ep.Launcher(), over, godebug.State(os.Getenv("GODEBUG")), sysmon.State())
	}
	// RIVET_CPUPROFILE=PREFIX writes each rank's CPU profile to
	// PREFIX.RANK, for `go tool pprof`.
	if prefix := os.Getenv("RIVET_CPUPROFILE"); prefix != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", prefix, w.Rank()))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, run := range runs {
		if err := run(ctx, w); err != nil {
			return err
		}
	}
	if testHookBenchDone != nil {
		testHookBenchDone()
	}
	return nil
}

// testHookBenchDone, when set (by tests), runs in each rank after its
// tests, while its endpoint is still open.
var testHookBenchDone func()

// benchArgErr maps an OSU option error to the command's outcome; a -v
// request prints the version and ends the command.
func benchArgErr(err error, stdout, stderr io.Writer, title string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return errHelp
	case osu.IsVersion(err):
		fmt.Fprintf(stdout, "# %s v%s\n", title, osu.Version)
		return errVersionShown
	default:
		fmt.Fprintln(stderr, "rivet bench:", err)
		return errUsage
	}
}

// errVersionShown ends a command that printed its version.
var errVersionShown = errors.New("version shown")

func ignoreVersion(err error) error {
	if err == errVersionShown {
		return nil
	}
	return err
}

// ftDetectCmd is rivet bench ft_detect: rounds of a job of np ranks in
// which one rank fails, each timed from the fault to the last survivor
// knowing (bench/ftbench).
func ftDetectCmd(ctx context.Context, np int, bind launch.Binding, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rivet bench ft_detect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rounds := fs.Int("rounds", 20, "jobs to time")
	fault := fs.String("fault", ftbench.Kill, "the fault: kill (SIGKILL) or stop (SIGSTOP)")
	sources := fs.String("sources", "all", "the failure sources the ranks use (RIVET_FT_SOURCES)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if os.Getenv(benchChildEnv) != "" {
		// A rank of one round.
		ep, err := fabric.Init(ctx)
		if err != nil {
			return err
		}
		defer ep.Close()
		took, err := ftbench.Round(ctx, ep, *fault)
		if err != nil {
			return err
		}
		if ep.World().Rank() == 0 {
			fmt.Fprintf(stdout, "detect-ns %d\n", took.Nanoseconds())
		}
		return nil
	}
	if _, err := fabric.ParseSources(*sources); err != nil || *rounds < 1 || np < 2 ||
		*fault != ftbench.Kill && *fault != ftbench.Stop {
		fmt.Fprintf(stderr, "rivet bench ft_detect: -np %d (2 or more), -rounds %d, -fault %q, -sources %q: %v\n", np, *rounds, *fault, *sources, err)
		return errUsage
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	want := 128 + 9
	if *fault == ftbench.Stop {
		want = fabric.ExitDeclaredFailed
	}
	var times []time.Duration
	prog := progress.New(stderr, "ft_detect")
	defer prog.Done()
	for r := 0; r < *rounds; r++ {
		prog.Step(r+1, *rounds, "round")
		var out bytes.Buffer
		st := launch.Run(ctx, launch.Options{N: np, FT: true, Bind: bind, Stdout: &out, Stderr: stderr,
			Env: []string{benchChildEnv + "=1", "RIVET_FT_SOURCES=" + *sources}},
			append([]string{self, "bench", "ft_detect"}, args...))
		var ns int64
		if _, err := fmt.Sscanf(out.String(), "detect-ns %d", &ns); err != nil || st != want {
			return fmt.Errorf("bench: ft_detect round %d: status %d (want %d), output %q", r, st, want, out.String())
		}
		times = append(times, time.Duration(ns))
	}
	ftbench.Report(stdout, fmt.Sprintf("Rivet Failure Detection Test: %d ranks, fault %s, sources %s, provider %s",
		np, *fault, *sources, providerName()), times)
	return nil
}

// providerName is the provider the ranks are asked for.
func providerName() string {
	if p := os.Getenv("RIVET_PROVIDER"); p != "" {
		return p
	}
	return "auto"
}
