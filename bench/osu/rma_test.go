//go:build linux

package osu

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// oneSidedEnv names a child job that runs one-sided benchmarks in turn:
// "NAME ARGS;NAME ARGS;...".
const oneSidedEnv = "RIVET_OSU_TEST_ONESIDED"

// The one-sided preambles, as OSU 7.4 prints them with its defaults
// (print_header_one_sided; osu_get_acc_latency's own header has no
// datatype line, and its defaults are create and lock).
func TestOneSidedHeaders(t *testing.T) {
	const lat = "# Size            Latency (us)\n"
	const bw = "# Size        Bandwidth (MB/s)\n"
	alloc := "# Window creation: MPI_Win_allocate\n"
	flush := "# Synchronization: MPI_Win_flush\n# Datatype: MPI_CHAR.\n"
	for name, want := range map[string]string{
		"osu_put_latency":     "# OSU MPI_Put Latency Test v7.4\n" + alloc + flush + lat,
		"osu_get_latency":     "# OSU MPI_Get latency Test v7.4\n" + alloc + flush + lat,
		"osu_put_bw":          "# OSU MPI_Put Bandwidth Test v7.4\n" + alloc + flush + bw,
		"osu_get_bw":          "# OSU MPI_Get Bandwidth Test v7.4\n" + alloc + flush + bw,
		"osu_put_bibw":        "# OSU MPI_Put Bi-directional Bandwidth Test v7.4\n" + alloc + "# Synchronization: MPI_Win_post/start/complete/wait\n# Datatype: MPI_CHAR.\n" + bw,
		"osu_acc_latency":     "# OSU MPI_Accumulate latency Test v7.4\n" + alloc + flush + lat,
		"osu_get_acc_latency": "# OSU MPI_Get_accumulate latency Test v7.4\n# Window creation: MPI_Win_create\n# Synchronization: MPI_Win_lock/unlock\n" + lat,
		"osu_fop_latency":     "# OSU MPI_Fetch_and_op latency Test v7.4\n" + alloc + flush + lat,
		"osu_cas_latency":     "# OSU MPI_Compare_and_swap latency Test v7.4\n" + alloc + flush + lat,
	} {
		b, ok := LookupOneSided(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		o, err := b.ParseArgs(nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		b.Header(&buf, o, o.Types[0])
		if buf.String() != want {
			t.Errorf("%s header:\n%q\nwant\n%q", name, buf.String(), want)
		}
	}
	fop, _ := LookupOneSided("osu_fop_latency")
	o, err := fop.ParseArgs([]string{"-w", "dynamic", "-s", "lock_all", "-T", "mpi_int"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	fop.Header(&buf, o, o.Types[0])
	if want := "# OSU MPI_Fetch_and_op latency Test v7.4\n# Window creation: MPI_Win_create_dynamic\n# Synchronization: MPI_Win_lock_all/unlock_all\n# Datatype: MPI_INT.\n" + lat; buf.String() != want {
		t.Errorf("fop header %q, want %q", buf.String(), want)
	}
}

func TestOneSidedParseArgs(t *testing.T) {
	put, _ := LookupOneSided("osu_put_latency")
	bw, _ := LookupOneSided("osu_put_bw")
	bibw, _ := LookupOneSided("osu_put_bibw")
	cas, _ := LookupOneSided("osu_cas_latency")
	o, err := put.ParseArgs([]string{"-w", "CREATE", "-s", "Flush_Local", "-m", "4:64", "-i", "7", "-x", "3"}, io.Discard)
	if err != nil || o.Win != WinCreate || o.Sync != SyncFlushLocal || o.MinSize != 4 || o.MaxSize != 64 ||
		o.Iterations != 7 || o.IterLarge != 7 || o.Warmup != 3 || o.WarmupLarge != 3 {
		t.Errorf("put options %+v, %v", o, err)
	}
	if o, err := put.ParseArgs(nil, io.Discard); err != nil || o.Iterations != 10000 || o.Warmup != 100 || o.IterLarge != 1000 ||
		o.WarmupLarge != 10 || o.MinSize != 1 || o.MaxSize != 1<<22 {
		t.Errorf("latency defaults %+v, %v", o, err)
	}
	if o, err := bw.ParseArgs([]string{"-W", "8"}, io.Discard); err != nil || o.Window != 8 || o.Iterations != 100 || o.IterLarge != 20 {
		t.Errorf("bandwidth options %+v, %v", o, err)
	}
	if o, err := put.ParseArgs([]string{"--decimals=4"}, io.Discard); err != nil || o.Decimals != 4 {
		t.Errorf("--decimals=4: %+v, %v", o, err)
	}
	if o, err := bibw.ParseArgs([]string{"-s", "fence"}, io.Discard); err != nil || o.Sync != SyncFence || o.Decimals != 2 {
		t.Errorf("bibw fence: %+v, %v", o, err)
	}
	o, err = cas.ParseArgs([]string{"-T", "mpi_float", "-T", "all", "-T", "MPI_LONG"}, io.Discard)
	if want := []Datatype{TypeFloat, TypeChar, TypeInt, TypeFloat, TypeLong}; err != nil || !slices.Equal(o.Types, want) {
		t.Errorf("-T: %v, %v; want %v", o.Types, err, want)
	}
	for _, bad := range []struct {
		b    OneSided
		args []string
	}{
		{put, []string{"-w", "shared"}},
		{put, []string{"-s", "sync"}},
		{put, []string{"-m", "0:8"}},
		{put, []string{"-T", "mpi_int"}}, // OSU's put tests take no -T
		{put, []string{"-W", "4"}},       // nor a window size
		{bibw, []string{"-s", "lock"}},
		{bibw, []string{"-s", "flush"}},
		{bw, []string{"-W", "-1"}},
		{cas, []string{"-T", "mpi_double"}},
		{put, []string{"--decimals", "12"}},
	} {
		if _, err := bad.b.ParseArgs(bad.args, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("%s %v: %v, want ErrUsage", bad.b.Name, bad.args, err)
		}
	}
}

// oneSidedCases are every benchmark × every synchronization it takes ×
// every window flavour, with -T all for the typed tests.
func oneSidedCases(extra string) []string {
	var cases []string
	for _, b := range OneSidedBenchmarks {
		syncs := []string{"lock", "flush", "flush_local", "lock_all", "pscw", "fence"}
		if b.kind == kindBiBW {
			syncs = []string{"pscw", "fence"}
		}
		for _, w := range []string{"create", "allocate", "dynamic"} {
			for _, s := range syncs {
				c := b.Name + " -w " + w + " -s " + s + " " + extra
				if b.typed() {
					c += " -T all -T mpi_long"
				}
				if b.kind != kindLatency {
					c += " -W 4"
				}
				cases = append(cases, c)
			}
		}
	}
	return cases
}

// TestOneSidedMatrix runs every one-sided benchmark with every
// synchronization and window flavour, on shared memory on the host and
// over verbs in the VM, and checks each preamble and row: every size
// between -m's bounds (for the atomics, one row per type), with a figure
// that is a number, not negative, in OSU's format (a tiny bandwidth run
// may print 0.00: three rounds of 8 bytes under the race detector).
func TestOneSidedMatrix(t *testing.T) {
	env := []string{"RIVET_PROVIDER=shm"}
	if testutil.InVM() || os.Getenv(testutil.RequireEnv) == "1" {
		env = []string{"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + testutil.RXEDevices(t)[0]}
	}
	cases := oneSidedCases("-m 2:16 -i 3 -x 1")
	out := run(t, append(env, oneSidedEnv+"="+strings.Join(cases, ";")), os.Args[0], "-test.run=^$")
	blocks := strings.Split(out, "# OSU ")[1:]
	want := 0
	for _, c := range cases {
		want++
		if strings.Contains(c, "-T all") {
			want += 3 // four types: char, int, float, long
		}
	}
	if len(blocks) != want {
		t.Fatalf("%d preambles, want %d:\n%s", len(blocks), want, out)
	}
	for _, blk := range blocks {
		lines := strings.Split(strings.TrimSuffix(blk, "\n"), "\n")
		var sizes []int
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "#") {
				continue
			}
			f := strings.Fields(l)
			size, err1 := strconv.Atoi(f[0])
			v, err2 := strconv.ParseFloat(f[len(f)-1], 64)
			if len(f) != 2 || err1 != nil || err2 != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || !strings.Contains(f[1], ".") || len(l) != 30 {
				t.Errorf("bad row %q in\n%s", l, blk)
			}
			sizes = append(sizes, size)
		}
		want := []int{2, 4, 8, 16}
		switch {
		case strings.Contains(lines[0], "Fetch_and_op"), strings.Contains(lines[0], "Compare_and_swap"):
			want = []int{map[string]int{"MPI_CHAR": 1, "MPI_INT": 4, "MPI_FLOAT": 4, "MPI_LONG": 8}[datatype(blk)]}
		case strings.Contains(lines[0], "MPI_Accumulate"):
			want = map[string][]int{"MPI_CHAR": {2, 4, 8, 16}, "MPI_INT": {4, 8, 16}, "MPI_FLOAT": {4, 8, 16}, "MPI_LONG": {8, 16}}[datatype(blk)]
		}
		if !slices.Equal(sizes, want) {
			t.Errorf("sizes %v, want %v, in\n%s", sizes, want, blk)
		}
	}
}

func datatype(block string) string {
	_, after, _ := strings.Cut(block, "# Datatype: ")
	name, _, _ := strings.Cut(after, ".")
	return name
}

// TestHostOneSidedLikeOpenMPI runs a spread of the one-sided cases, and
// the C comparator (bench/osu/testdata/osu_rma.c) under Open MPI with the same
// options, on shared memory, and requires the same lines but for the
// figures. Open MPI runs with osc/sm (allocate) and osc/pt2pt: its
// osc/rdma over vader crashes on an 8-byte compare-and-swap (4.1.4).
func TestHostOneSidedLikeOpenMPI(t *testing.T) {
	mpicc := testutil.LookTool(t, "mpicc.openmpi", "libopenmpi-dev")
	mpirun := testutil.LookTool(t, "mpirun.openmpi", "openmpi-bin")
	bin := filepath.Join(t.TempDir(), "osu_rma")
	if out, err := exec.Command(mpicc, "-O2", "-o", bin, "testdata/osu_rma.c").CombinedOutput(); err != nil {
		t.Fatalf("building the comparator: %v\n%s", err, out)
	}
	var cases []string
	for i, c := range oneSidedCases("-m 32 -i 20 -x 2") {
		if i%5 == 0 || strings.Contains(c, "allocate -s flush ") { // every default, and a fifth of the rest
			cases = append(cases, c)
		}
	}
	got := run(t, []string{"RIVET_PROVIDER=shm", oneSidedEnv + "=" + strings.Join(cases, ";")}, os.Args[0], "-test.run=^$")
	var want strings.Builder
	for _, c := range cases {
		cmd := exec.Command(mpirun, append([]string{"-n", "2", "--oversubscribe", "--mca", "btl", "self,vader", "--mca", "osc", "^rdma,ucx", bin}, strings.Fields(c)...)...)
		cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("comparator %s: %v\n%s", c, err, stderr.String())
		}
		want.WriteString(stdout.String())
	}
	if shape(got) != shape(want.String()) {
		t.Errorf("Rivet and the Open MPI comparator differ:\n%s\n---\n%s", got, want.String())
	}
	if s := shape(got); strings.Contains(s, "bad wide") || strings.Contains(s, "18 wide") || !strings.Contains(s, "20 wide") {
		t.Errorf("a row is not OSU's one-sided columns (10 for the size, 20 a figure):\n%s", got)
	}
}
