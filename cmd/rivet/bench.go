package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rivet-hpc/rivet/bench/osu"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/launch"
)

const benchUsage = `usage: rivet bench [-np N] [osu_latency|osu_bw|osu_bibw|all] [OSU options]

Runs OSU Micro-Benchmarks 7.4 point-to-point tests over the Rivet fabric,
printing exactly what OSU prints. Under a launcher (rivetrun, mpiexec.hydra,
srun) it runs in the job it was started in; started on its own it launches
N ranks on this node first (shared memory). With no test name it runs all.

OSU options: -m [MIN:]MAX  -i ITER  -x WARMUP  -W WINDOW (bandwidth)  -v

Flags:
`

// benchChildEnv marks processes that rivet bench launched itself, so they
// never launch again.
const benchChildEnv = "RIVET_BENCH_CHILD"

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rivet bench", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fs.PrintDefaults() }
	np := fs.Int("np", 2, "ranks to launch when not started by a launcher")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	rest := fs.Args()
	var tests []osu.Benchmark
	if len(rest) == 0 || rest[0] == "all" {
		tests = osu.Benchmarks
		if len(rest) > 0 {
			rest = rest[1:]
		}
	} else {
		b, ok := osu.Lookup(rest[0])
		if !ok {
			fmt.Fprintf(stderr, "rivet bench: no benchmark %q\n%s", rest[0], benchUsage)
			return errUsage
		}
		tests, rest = []osu.Benchmark{b}, rest[1:]
	}
	opts := make([]osu.Options, len(tests))
	for i, b := range tests {
		o, err := b.ParseArgs(rest, stderr)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return errHelp
		case osu.IsVersion(err):
			fmt.Fprintf(stdout, "# %s v%s\n", b.Title, osu.Version)
			return nil
		case err != nil:
			fmt.Fprintln(stderr, "rivet bench:", err)
			return errUsage
		}
		opts[i] = o
	}

	ep, err := fabric.Init(ctx)
	if err != nil {
		return err
	}
	defer ep.Close()
	w := ep.World()
	if w.Size() == 1 && os.Getenv(benchChildEnv) == "" {
		if *np < 2 {
			return fmt.Errorf("bench: -np %d: the tests need two ranks", *np)
		}
		ep.Close()
		self, err := os.Executable()
		if err != nil {
			return err
		}
		st := launch.Run(ctx, launch.Options{N: *np, Env: []string{benchChildEnv + "=1"}, Stdout: stdout, Stderr: stderr},
			append([]string{self, "bench"}, args...))
		if st != 0 {
			return fmt.Errorf("bench: the job exited with status %d", st)
		}
		return nil
	}
	if w.Rank() == 0 {
		fmt.Fprintf(stderr, "# rivet: %d ranks (%s); rank 1 over %s\n", w.Size(), ep.Launcher(), ep.Provider(1))
	}
	for i, b := range tests {
		if err := b.Run(ctx, w, opts[i], stdout); err != nil {
			return err
		}
	}
	return nil
}


