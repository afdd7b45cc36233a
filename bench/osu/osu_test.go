//go:build linux

package osu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/launch"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

const progEnv = "RIVET_OSU_TEST_PROG"

func TestMain(m *testing.M) {
	if name := os.Getenv(progEnv); name != "" {
		os.Exit(child(name, false))
	}
	if name := os.Getenv(collEnv); name != "" {
		os.Exit(child(name, true))
	}
	if os.Getenv(initEnv) != "" {
		os.Exit(childInit())
	}
	if list := os.Getenv(oneSidedEnv); list != "" {
		os.Exit(childOneSided(list))
	}
	os.Exit(m.Run())
}

// child runs one benchmark, point-to-point or collective, as a rank of a
// job the test launched.
func child(name string, coll bool) int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ep, err := fabric.Init(ctx)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	defer ep.Close()
	args := strings.Fields(os.Getenv("RIVET_OSU_TEST_ARGS"))
	if coll {
		b, _ := LookupCollective(name)
		var o CollOptions
		if o, err = b.ParseArgs(args, io.Discard); err == nil {
			err = b.Run(ctx, ep.World(), o, os.Stdout)
		}
	} else {
		b, _ := Lookup(name)
		var o Options
		if o, err = b.ParseArgs(args, io.Discard); err == nil {
			err = b.Run(ctx, ep.World(), o, os.Stdout)
		}
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	return 0
}

// childOneSided runs one-sided benchmarks in turn, "NAME ARGS;...", as
// ranks of one job.
func childOneSided(list string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ep, err := fabric.Init(ctx)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	defer ep.Close()
	for _, c := range strings.Split(list, ";") {
		f := strings.Fields(c)
		b, ok := LookupOneSided(f[0])
		if !ok {
			os.Stderr.WriteString("no benchmark " + f[0] + "\n")
			return 1
		}
		o, err := b.ParseArgs(f[1:], os.Stderr)
		if err == nil {
			err = b.Run(ctx, ep.World(), o, os.Stdout)
		}
		if err != nil {
			os.Stderr.WriteString(c + ": " + err.Error() + "\n")
			return 1
		}
	}
	return 0
}

// The preambles, exactly as OSU 7.4 prints them.
func TestHeaders(t *testing.T) {
	for name, want := range map[string]string{
		"osu_latency": "\n# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n",
		"osu_bw":      "\n# OSU MPI Bandwidth Test v7.4\n# Datatype: MPI_CHAR.\n# Size      Bandwidth (MB/s)\n",
		"osu_bibw":    "\n# OSU MPI Bi-Directional Bandwidth Test v7.4\n# Datatype: MPI_CHAR.\n# Size      Bandwidth (MB/s)\n",
	} {
		b, ok := Lookup(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		var buf bytes.Buffer
		b.Header(&buf, Options{})
		if buf.String() != want {
			t.Errorf("%s header:\n%q\nwant\n%q", name, buf.String(), want)
		}
	}
	var buf bytes.Buffer
	lat, _ := Lookup("osu_latency")
	lat.Header(&buf, Options{Percentiles: true})
	if want := "\n# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)   P50 Latency(us)   P90 Latency(us)   P99 Latency(us)   Max Latency(us)\n"; buf.String() != want {
		t.Errorf("header with percentiles:\n%q\nwant\n%q", buf.String(), want)
	}
	buf.Reset()
	// Two rows of a real OSU 7.4 osu_bw run.
	row(&buf, 0, 1, 2.32)
	row(&buf, 2, 4194304, 27161.33)
	if want := "1                       2.32\n4194304             27161.33\n"; buf.String() != want {
		t.Errorf("rows %q, want %q", buf.String(), want)
	}
	buf.Reset()
	row(&buf, 4, 1, 0.0012)
	if want := "1                     0.0012\n"; buf.String() != want {
		t.Errorf("a row with 4 decimals: %q, want %q", buf.String(), want)
	}
	bw, _ := Lookup("osu_bw")
	if o, err := bw.ParseArgs([]string{"--decimals", "4"}, io.Discard); err != nil || o.Decimals != 4 {
		t.Errorf("osu_bw --decimals 4: %+v, %v", o, err)
	}
	for _, bad := range []string{"0", "10", "-1"} {
		if _, err := bw.ParseArgs([]string{"--decimals", bad}, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("osu_bw --decimals %s: %v, want ErrUsage", bad, err)
		}
	}
}

func TestParseArgs(t *testing.T) {
	lat, _ := Lookup("osu_latency")
	bw, _ := Lookup("osu_bw")
	o, err := lat.ParseArgs([]string{"-m", "2:128", "-i", "50", "-x", "5"}, io.Discard)
	if err != nil || o.MinSize != 2 || o.MaxSize != 128 || o.Iterations != 50 || o.IterLarge != 50 || o.Warmup != 5 || o.WarmupLarge != 5 {
		t.Errorf("latency options %+v, %v", o, err)
	}
	if got := o.sizes(); len(got) != 7 || got[0] != 2 || got[6] != 128 {
		t.Errorf("sizes %v", got)
	}
	if o, err = lat.ParseArgs([]string{"-m", "64"}, io.Discard); err != nil || o.MinSize != 0 || o.MaxSize != 64 || o.sizes()[0] != 0 {
		t.Errorf("-m 64: %+v %v", o, err)
	}
	if o, err = bw.ParseArgs([]string{"-m", "8:", "-W", "16"}, io.Discard); err != nil || o.MinSize != 8 || o.MaxSize != 1<<22 || o.Window != 16 {
		t.Errorf("bw options %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"-m", "x"}, {"-m", "9:3"}, {"-i", "-2"}, {"-W", "4"}, {"extra"}, {"-q"}} {
		if _, err := lat.ParseArgs(bad, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("latency %v: %v, want ErrUsage", bad, err)
		}
	}
	if o, err := lat.ParseArgs([]string{"--percentiles"}, io.Discard); err != nil || !o.Percentiles {
		t.Errorf("--percentiles: %+v, %v", o, err)
	}
	if _, err := bw.ParseArgs([]string{"-percentiles"}, io.Discard); !errors.Is(err, ErrUsage) {
		t.Errorf("osu_bw -percentiles: %v, want ErrUsage (latency only)", err)
	}
	if _, err := bw.ParseArgs([]string{"-W", "0"}, io.Discard); err != nil {
		t.Errorf("-W 0 means the default: %v", err)
	}
	if _, err := bw.ParseArgs([]string{"-W", "-1"}, io.Discard); !errors.Is(err, ErrUsage) {
		t.Errorf("-W -1: %v", err)
	}
}

func run(t *testing.T, env []string, argv ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Unpinned, as these tests of the output's format always ran (the
	// launcher's default pins 2 ranks on 2 CPUs; cmd/rivet tests that).
	if st := launch.Run(ctx, launch.Options{N: 2, Bind: launch.BindNone, Env: env, Stdout: &out, Stderr: &errb}, argv); st != 0 {
		t.Fatalf("%v: status %d\n%s\n%s", argv, st, out.String(), errb.String())
	}
	return out.String()
}

var (
	rowRE     = regexp.MustCompile(`^([0-9]+)((?: +[0-9]+\.[0-9]{2})+)$`)
	bareRowRE = regexp.MustCompile(`^ +[0-9]+\.[0-9]{2}$`) // osu_barrier's: no size column
)

// shape is the output with the figures blanked: what must be identical.
func shape(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if m := rowRE.FindStringSubmatch(l); m != nil {
			n := len(strings.Fields(m[2])) // OSU's 10-wide size, then the figures
			width := "bad"
			if (len(l)-10)%n == 0 && len(m[1]) < 10 {
				width = fmt.Sprint((len(l) - 10) / n)
			}
			l = fmt.Sprintf("%s <%d values, %s wide>", m[1], n, width)
		} else if bareRowRE.MatchString(l) {
			l = "<value, " + (map[bool]string{true: "17", false: "bad"})[len(l) == 17] + " wide>"
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// TestHostRunsLikeOpenMPIComparator runs each benchmark on two ranks over
// shared memory, and the C comparator (bench/osu/testdata) under Open MPI with the
// same options, and requires the same lines but for the figures.
func TestHostRunsLikeOpenMPIComparator(t *testing.T) {
	for _, tc := range []struct{ rivet, ompi, args string }{
		{"osu_latency", "latency", "-m 4096 -i 200 -x 20"},
		{"osu_latency", "latency", "-m 64 -i 200 -x 20 --percentiles"},
		{"osu_bw", "bw", "-m 65536 -i 10 -x 2 -W 8"},
		{"osu_bibw", "bibw", "-m 65536 -i 10 -x 2 -W 8"},
	} {
		got := run(t, []string{progEnv + "=" + tc.rivet, "RIVET_OSU_TEST_ARGS=" + tc.args}, os.Args[0], "-test.run=^$")
		if strings.Count(got, "\n") < 10 {
			t.Fatalf("%s printed too little:\n%s", tc.rivet, got)
		}
		mpicc := testutil.LookTool(t, "mpicc.openmpi", "libopenmpi-dev")
		mpirun := testutil.LookTool(t, "mpirun.openmpi", "openmpi-bin")
		bin := filepath.Join(t.TempDir(), "osu")
		if out, err := exec.Command(mpicc, "-O2", "-o", bin, "testdata/osu.c").CombinedOutput(); err != nil {
			t.Fatalf("building the comparator: %v\n%s", err, out)
		}
		cmd := exec.Command(mpirun, append([]string{"-n", "2", "--mca", "btl", "self,vader", bin, tc.ompi}, strings.Fields(tc.args)...)...)
		cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("comparator: %v\n%s", err, stderr.String())
		}
		if shape(got) != shape(stdout.String()) {
			t.Errorf("%s and the Open MPI comparator differ:\n%s\n---\n%s", tc.rivet, got, stdout.String())
		}
		if strings.Contains(shape(got), "bad wide") || strings.Contains(shape(got), "20 wide") {
			t.Errorf("a row is not OSU's columns (10 for the size, 18 a figure):\n%s", got)
		}
		if want := map[bool]string{true: "<5 values", false: "<1 values"}[strings.Contains(tc.args, "percentiles")]; !strings.Contains(shape(got), want) {
			t.Errorf("%s %s: no row of %s>:\n%s", tc.rivet, tc.args, want, got)
		}
	}
}

// The collective preambles, as OSU 7.4 prints them.
func TestCollectiveHeaders(t *testing.T) {
	for name, want := range map[string]string{
		"osu_allreduce":  "\n# OSU MPI Allreduce Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n",
		"osu_barrier":    "\n# OSU MPI Barrier Latency Test v7.4\n# Avg Latency(us)\n",
		"osu_alltoall":   "\n# OSU MPI All-to-All Personalized Exchange Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n",
		"osu_iallreduce": "\n# OSU MPI Non-blocking Allreduce Latency Test v7.4\n# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n\n# Datatype: MPI_CHAR.\n# Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)\n",
	} {
		b, ok := LookupCollective(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		var buf bytes.Buffer
		b.Header(&buf, CollOptions{})
		if buf.String() != want {
			t.Errorf("%s header:\n%q\nwant\n%q", name, buf.String(), want)
		}
	}
	g, _ := LookupCollective("osu_gather")
	var buf bytes.Buffer
	g.Header(&buf, CollOptions{Full: true})
	// A real OSU 7.4 osu_gather -f header.
	if want := "# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations\n"; !strings.HasSuffix(buf.String(), want) {
		t.Errorf("full header %q", buf.String())
	}
}

// TestHostCollectivesLikeOpenMPIComparator: osu_allreduce and osu_barrier on
// four ranks print the same lines as the C comparator under Open MPI, but
// for the figures; every other collective benchmark runs and prints rows.
func TestHostCollectivesLikeOpenMPIComparator(t *testing.T) {
	mpicc := testutil.LookTool(t, "mpicc.openmpi", "libopenmpi-dev")
	mpirun := testutil.LookTool(t, "mpirun.openmpi", "openmpi-bin")
	bin := filepath.Join(t.TempDir(), "osu")
	if out, err := exec.Command(mpicc, "-O2", "-o", bin, "testdata/osu.c").CombinedOutput(); err != nil {
		t.Fatalf("building the comparator: %v\n%s", err, out)
	}
	for _, tc := range []struct{ rivet, ompi, args string }{
		{"osu_allreduce", "allreduce", "-m 65536 -i 20 -x 2"},
		{"osu_barrier", "barrier", "-i 20 -x 2"},
	} {
		got := runN(t, 4, []string{collEnv + "=" + tc.rivet, "RIVET_OSU_TEST_ARGS=" + tc.args})
		cmd := exec.Command(mpirun, append([]string{"-n", "4", "--oversubscribe", "--mca", "btl", "self,vader", bin, tc.ompi}, strings.Fields(tc.args)...)...)
		cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("comparator: %v\n%s", err, stderr.String())
		}
		if shape(got) != shape(stdout.String()) {
			t.Errorf("%s and the Open MPI comparator differ:\n%s\n---\n%s", tc.rivet, got, stdout.String())
		}
	}
	for _, b := range Collectives {
		args := "-m 1024 -i 5 -x 1"
		if !b.sized {
			args = "-i 5 -x 1"
		}
		got := runN(t, 3, []string{collEnv + "=" + b.Name, "RIVET_OSU_TEST_ARGS=" + args + " -f"})
		if !strings.Contains(got, "# "+b.Title+" v7.4") || strings.Count(got, "\n") < 4 {
			t.Errorf("%s printed:\n%s", b.Name, got)
		}
	}
}

var fullRowRE = regexp.MustCompile(`^ *[0-9]+(\.[0-9]{2})?( +[0-9]+\.[0-9]{2})*( +[0-9]+)?$`)

func runN(t *testing.T, n int, env []string) string {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	argv := []string{os.Args[0], "-test.run=^$"}
	if st := launch.Run(ctx, launch.Options{N: n, Bind: launch.BindNone, Env: env, Stdout: &out, Stderr: &errb}, argv); st != 0 {
		t.Fatalf("%v: status %d\n%s\n%s", env, st, out.String(), errb.String())
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") && !fullRowRE.MatchString(l) {
			t.Errorf("%v: not a row: %q", env, l)
		}
	}
	return out.String()
}

const collEnv = "RIVET_OSU_TEST_COLL"

// Nearest-rank percentiles: the ⌈p·n/100⌉-th smallest of n.
func TestPercentiles(t *testing.T) {
	v := make([]float64, 200)
	for i := range v {
		v[i] = float64((i*37)%200 + 1) // 1..200, shuffled
	}
	got := percentiles(v)
	if want := []float64{100, 180, 198, 200}; !slices.Equal(got, want) {
		t.Errorf("percentiles of 1..200 = %v, want %v", got, want)
	}
	if got := percentiles([]float64{7}); !slices.Equal(got, []float64{7, 7, 7, 7}) {
		t.Errorf("percentiles of one = %v", got)
	}
	if got := percentiles(nil); !slices.Equal(got, []float64{0, 0, 0, 0}) {
		t.Errorf("percentiles of none = %v", got)
	}
}
