//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestMain lets the test binary act as the rivet command, so tests can run
// the real binary (under setpriv, say) without compiling it in the VM.
func TestMain(m *testing.M) {
	if os.Getenv("RIVET_TEST_AS_MAIN") == "1" { // the whole command, re-execution included
		main()
	}
	if os.Getenv("RIVET_TEST_AS_CLI") == "1" || os.Getenv(benchChildEnv) != "" {
		if dir := os.Getenv(holdEnv); dir != "" {
			testHookBenchDone = func() { holdRank(dir) }
		}
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func rivet(args ...string) (stdout, stderr string, status int) {
	var out, errb bytes.Buffer
	status = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), status
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{nil, 2, "usage: rivet"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"rxe"}, 1, "usage: rivet rxe add NAME NETDEV"},
		{[]string{"rxe", "add", "x"}, 1, "usage: rivet rxe add NAME NETDEV"},
		{[]string{"devices", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"devices", "-bogus"}, 2, "flag provided but not defined"},
		{[]string{"perf", "write_bw", "-U"}, 1, "-H and -U report latency tests"},
	} {
		_, stderr, status := rivet(tc.args...)
		if status != tc.status || !strings.Contains(stderr, tc.want) {
			t.Errorf("rivet %q: status %d, stderr %q; want %d and %q", tc.args, status, stderr, tc.status, tc.want)
		}
	}
}

// TestHostDevicesWithoutRDMA: on a machine without RDMA, devices says so and
// succeeds; JSON is an empty list.
func TestHostDevicesWithoutRDMA(t *testing.T) {
	if testutil.InVM() {
		t.Skip("the VM has RDMA devices")
	}
	if devs, _ := hw.Devices(); len(devs) > 0 {
		t.Skip("this host has RDMA devices")
	}
	_, stderr, status := rivet("devices")
	if status != 0 || !strings.Contains(stderr, "no RDMA devices found") {
		t.Errorf("status %d, stderr %q", status, stderr)
	}
	out, _, status := rivet("devices", "-json")
	if status != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("status %d, json %q", status, out)
	}
}

// TestDevicesOnRXE runs `rivet devices` against the topology's devices.
func TestDevicesOnRXE(t *testing.T) {
	devs := testutil.RXEDevices(t)
	testutil.CheckFDs(t)
	out, stderr, status := rivet("devices")
	if status != 0 {
		t.Fatalf("status %d: %s", status, stderr)
	}
	t.Logf("rivet devices:\n%s", out)
	for _, d := range devs {
		if !strings.Contains(out, "hca_id:\t"+d+"\n") {
			t.Errorf("no hca_id line for %s", d)
		}
	}
	for key, want := range map[string]string{
		"state":      "PORT_ACTIVE (4)",
		"phys_state": "LINK_UP (5)",
		"active_mtu": "1024 (3)",
		"max_mtu":    "4096 (5)",
		"link_layer": "Ethernet",
		"GID[  1]":   "::ffff:192.0.2.1, RoCE v2",
		"uverbs":     "/dev/infiniband/uverbs0 (ABI 2)",
	} {
		if got := field(out, key); got != want {
			t.Errorf("%s: %q, want %q", key, got, want)
		}
	}

	js, _, status := rivet("devices", "-json")
	var parsed []struct {
		Name  string
		Ports []struct {
			State, ActiveMTU string
			GIDs             []struct{ GID, Type string }
		}
	}
	if err := json.Unmarshal([]byte(js), &parsed); err != nil || status != 0 {
		t.Fatalf("json: %v (status %d)\n%s", err, status, js)
	}
	if len(parsed) != len(devs) || parsed[0].Name != devs[0] || parsed[0].Ports[0].State != "ACTIVE" ||
		parsed[0].Ports[0].ActiveMTU != "1024" {
		t.Errorf("json = %+v", parsed)
	}
}

// TestDevicesMatchesIbvDevinfo compares the facts with the C reference.
func TestDevicesMatchesIbvDevinfo(t *testing.T) {
	devs := testutil.RXEDevices(t)
	ref, err := exec.Command("ibv_devinfo", "-v", "-d", devs[0]).Output()
	if err != nil {
		testutil.Unavailable(t, "ibv_devinfo (ibverbs-utils): "+err.Error())
	}
	out, _, _ := rivet("devices")
	for _, key := range []string{"state", "max_mtu", "active_mtu", "link_layer", "GID[  1]", "node_guid"} {
		if a, b := field(out, key), field(string(ref), key); a != b {
			t.Errorf("%s: rivet %q, ibv_devinfo %q", key, a, b)
		}
	}
}

func TestRXEAddDelete(t *testing.T) {
	testutil.RXEDevices(t)
	testutil.RequireRoot(t)
	for _, args := range [][]string{
		{"link", "add", "rvc0", "type", "veth", "peer", "name", "rvc1"},
		{"addr", "add", "198.51.100.9/24", "dev", "rvc0"},
		{"link", "set", "rvc0", "up"},
		{"link", "set", "rvc1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %q: %v: %s", args, err, out)
		}
	}
	defer exec.Command("ip", "link", "del", "rvc0").Run()

	// rivet events runs throughout and must report the port going down.
	watching := make(chan struct{})
	testHookWatching = func() { close(watching) }
	defer func() { testHookWatching = func() {} }()
	ctx, cancel := context.WithCancel(context.Background())
	var events testutil.SyncBuffer
	eventsDone := make(chan int)
	go func() { eventsDone <- run(ctx, []string{"events"}, &events, &events) }()
	defer func() {
		cancel()
		if st := <-eventsDone; st != 0 {
			t.Errorf("rivet events exited %d: %s", st, events.String())
		}
	}()
	select {
	case <-watching:
	case st := <-eventsDone:
		t.Fatalf("rivet events exited %d before it watched: %s", st, events.String())
	}

	out, stderr, status := rivet("rxe", "add", "rvcli0", "rvc0")
	if status != 0 || out != "added rvcli0 on rvc0\n" {
		t.Fatalf("add: status %d, %q %q", status, out, stderr)
	}

	// rivet devices shows the new link once its port is up and its GID set.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, _ = rivet("devices")
		_, dev, _ := strings.Cut(out, "hca_id:\trvcli0\n")
		if field(dev, "state") == "PORT_ACTIVE (4)" && strings.Contains(dev, "::ffff:198.51.100.9, RoCE v2") {
			if field(dev, "netdev") != "rvc0" {
				t.Errorf("rvcli0 netdev = %q", field(dev, "netdev"))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rivet devices never showed rvcli0 ACTIVE with the GID of 198.51.100.9:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The watcher samples port states (on link updates, then every
	// second): it must have reported the port ACTIVE before the test
	// takes it down, or both changes could fall between two samples.
	for deadline := time.Now().Add(2 * time.Second); !strings.Contains(events.String(), "PORT_ACTIVE rvcli0 port 1 (rvc0) state ACTIVE"); {
		if time.Now().After(deadline) {
			t.Fatalf("rivet events did not report rvcli0 becoming active:\n%s", events.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := exec.Command("ip", "link", "set", "rvc0", "down").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for deadline := time.Now().Add(2 * time.Second); !strings.Contains(events.String(), "PORT_ERR rvcli0 port 1 (rvc0) state DOWN"); {
		if time.Now().After(deadline) {
			t.Fatalf("rivet events did not report rvcli0 going down:\n%s", events.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("rivet events:\n%s", events.String())

	out, stderr, status = rivet("rxe", "del", "rvcli0")
	if status != 0 || out != "deleted rvcli0\n" {
		t.Fatalf("del: status %d, %q %q", status, out, stderr)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rxe", "add", "rvcli1", "nosuch0"}, `rivet: rxe add rvcli1: netdev "nosuch0": not found`},
		{[]string{"rxe", "del", "nosuch"}, `rivet: rxe del: RDMA device "nosuch": not found`},
	} {
		_, stderr, status := rivet(tc.args...)
		if status != 1 || strings.TrimSpace(stderr) != tc.want {
			t.Errorf("rivet %q: status %d, stderr %q; want %q", tc.args, status, stderr, tc.want)
		}
	}
}

// TestRXEAddNotRoot drops CAP_NET_ADMIN with setpriv and runs the real
// binary: the error must say what is missing.
func TestRXEAddNotRoot(t *testing.T) {
	testutil.RXEDevices(t)
	testutil.RequireRoot(t)
	cmd := exec.Command("setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin", os.Args[0], "rxe", "add", "rvnr0", "lo")
	cmd.Env = append(os.Environ(), "RIVET_TEST_AS_CLI=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "needs CAP_NET_ADMIN: run as root") {
		t.Errorf("err %v, output %q", err, out)
	}
}

// TestRXEAddModuleNotLoaded unloads rdma_rxe and stops the kernel from
// loading it on demand, then restores the topology.
func TestRXEAddModuleNotLoaded(t *testing.T) {
	devs := testutil.RXEDevices(t)
	testutil.RequireRoot(t)
	parents := map[string]string{}
	for _, d := range devs {
		dev, err := hw.DeviceByName(d)
		if err != nil {
			t.Fatal(err)
		}
		parents[d] = dev.Parent
		if err := hw.DeleteRXE(d); err != nil {
			t.Fatal(err)
		}
	}
	const modprobeKnob = "/proc/sys/kernel/modprobe"
	oldModprobe, _ := os.ReadFile(modprobeKnob)
	t.Cleanup(func() {
		os.WriteFile(modprobeKnob, oldModprobe, 0o644)
		exec.Command("modprobe", "rdma_rxe").Run()
		for d, p := range parents {
			if err := hw.AddRXE(d, p); err != nil {
				t.Errorf("restoring %s: %v", d, err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for d := range parents {
			for {
				dev, err := hw.DeviceByName(d)
				if err == nil && dev.Ports[0].State == hw.PortActive {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("%s not ACTIVE again", d)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	if out, err := exec.Command("rmmod", "rdma_rxe").CombinedOutput(); err != nil {
		t.Fatalf("rmmod rdma_rxe: %v: %s", err, out)
	}
	if err := os.WriteFile(modprobeKnob, []byte("/bin/false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, status := rivet("rxe", "add", "rvnm0", "lo")
	want := "rivet: rxe add rvnm0: invalid argument (module rdma_rxe is not loaded: modprobe rdma_rxe)"
	if status != 1 || strings.TrimSpace(stderr) != want {
		t.Errorf("status %d, stderr %q; want %q", status, stderr, want)
	}
}

// field returns the value of the first "key: value" line in ibv_devinfo-style
// output.
func field(s, key string) string {
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestHostBench: run alone, rivet bench launches two ranks of itself on
// shared memory and prints OSU's tables.
func TestHostBench(t *testing.T) {
	out, errs, st := rivet("bench", "osu_latency", "-m", "1024", "-i", "100", "-x", "10")
	if st != 0 {
		t.Fatalf("status %d\n%s\n%s", st, out, errs)
	}
	if !strings.HasPrefix(out, "\n# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n0   ") ||
		!strings.Contains(out, "\n1024  ") {
		t.Errorf("output:\n%s", out)
	}
	if !strings.Contains(errs, "rank 1 over shm") {
		t.Errorf("stderr does not name the provider:\n%s", errs)
	}
	if _, _, st := rivet("bench", "osu_nope"); st != 2 {
		t.Errorf("unknown benchmark: status %d", st)
	}
	if _, errs, st := rivet("bench", "osu_bw", "-m", "5:2"); st != 2 || !strings.Contains(errs, "MIN") {
		t.Errorf("bad -m: status %d, %s", st, errs)
	}
}

// TestHostBenchUnderMpirun: rivet bench started by Open MPI's mpirun runs
// as one job of mpirun's processes, met over its PMIx server — one table,
// not one a process — for the point-to-point, collective and one-sided
// suites; a test that launches its rounds itself (ft_detect) refuses, at
// every process, to launch inside mpirun's job.
func TestHostBenchUnderMpirun(t *testing.T) {
	mpirun := testutil.LookTool(t, "mpirun.openmpi", "openmpi-bin")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	under := func(n int, args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, mpirun, append([]string{"-n", fmt.Sprint(n), "--oversubscribe", self}, args...)...)
		cmd.Env = append(os.Environ(), "RIVET_TEST_AS_MAIN=1", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	// The suites: point-to-point, a collective, one-sided.
	for _, tc := range []struct {
		n           int
		args        []string
		header, row string
	}{
		{2, []string{"osu_latency", "-m", "8:8", "-i", "10"}, "# OSU MPI Latency Test v7.4\n", "8"},
		{4, []string{"osu_allreduce", "-m", "8:64", "-i", "100", "-x", "10"}, "# OSU MPI Allreduce Latency Test v7.4\n", "64"},
		{2, []string{"osu_fop_latency", "-i", "200", "-x", "20"}, "# OSU MPI_Fetch_and_op latency Test v7.4\n", "1"},
	} {
		out, errs, err := under(tc.n, append([]string{"bench"}, tc.args...)...)
		if err != nil || strings.Count(out, tc.header) != 1 || !regexp.MustCompile(`(?m)^`+tc.row+` +[0-9]+\.[0-9]{2}$`).MatchString(out) ||
			!strings.Contains(out+errs, fmt.Sprintf("%d ranks (pmix)", tc.n)) {
			t.Errorf("%v under mpirun -n %d: %v\nstdout:\n%s\nstderr:\n%s", tc.args, tc.n, err, out, errs)
		}
	}
	out, errs, err := under(2, "bench", "-np", "2", "ft_detect", "-rounds", "1")
	if err == nil || strings.Contains(out, "Detection") {
		t.Fatalf("ft_detect under mpirun -n 2: %v\nstdout:\n%s\nstderr:\n%s", err, out, errs)
	}
	if n := strings.Count(errs, "is one of a job another launcher started: Open MPI's mpirun started it"); n != 2 {
		t.Errorf("ft_detect under mpirun -n 2: %d processes named the launcher, want 2:\n%s", n, errs)
	}
}

// TestHostBenchFTDetect: rivet bench ft_detect times rounds of a job
// that loses a rank, and prints their median, fastest and slowest.
func TestHostBenchFTDetect(t *testing.T) {
	out, errs, st := rivet("bench", "-np", "3", "ft_detect", "-rounds", "2", "-sources", "pidfd")
	if st != 0 {
		t.Fatalf("status %d\n%s\n%s", st, out, errs)
	}
	if !strings.Contains(out, "# Rivet Failure Detection Test: 3 ranks, fault kill, sources pidfd") ||
		!regexp.MustCompile(`\n2 +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2}\n`).MatchString(out) {
		t.Errorf("output:\n%s", out)
	}
	for _, bad := range [][]string{{"-np", "1"}, {"-fault", "hang"}, {"-sources", "psychic"}, {"-rounds", "0"}} {
		args := append([]string{"bench"}, bad[0], bad[1])
		if bad[0] != "-np" {
			args = []string{"bench", "ft_detect", bad[0], bad[1]}
		} else {
			args = append(args, "ft_detect")
		}
		if _, _, st := rivet(args...); st != 2 {
			t.Errorf("rivet %v: status %d, want 2", args, st)
		}
	}
}

// TestHostBenchFTRecover: rivet bench ft_recover prints a row per
// operation — agree, iagree, shrink, revoke and shrink after a failure
// beside barrier, allreduce and dup — OSU's way.
func TestHostBenchFTRecover(t *testing.T) {
	// With -failure the last rank dies after the other rows, and the job
	// (launched fault tolerant) still succeeds.
	out, errs, st := rivet("bench", "-np", "3", "ft_recover", "-i", "20", "-x", "2", "-failure")
	if st != 0 {
		t.Fatalf("status %d\n%s\n%s", st, out, errs)
	}
	if !strings.Contains(out, "# Rivet Fault-Tolerance Recovery Test: 3 ranks\n") {
		t.Errorf("output:\n%s", out)
	}
	for _, row := range []string{"barrier", `allreduce \(4 B\)`, "comm dup", "agree", "iagree", "shrink", "revoke", `shrink \(1 failed\)`} {
		if !regexp.MustCompile(`\n` + row + ` +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +20\n`).MatchString(out) {
			t.Errorf("no %s row in\n%s", row, out)
		}
	}
	for _, bad := range [][]string{{"-i", "0"}, {"-x", "-1"}, {"extra"}} {
		args := append([]string{"bench", "ft_recover"}, bad...)
		if _, _, st := rivet(args...); st != 2 {
			t.Errorf("rivet %v: status %d, want 2", args, st)
		}
	}
}

// TestHostBenchFTRespawn: rivet bench ft_respawn prints the spawn rows
// and each step of a recovery to full size, over rounds in which the
// replacement of the last round is the one killed.
func TestHostBenchFTRespawn(t *testing.T) {
	out, errs, st := rivet("bench", "-np", "3", "ft_respawn", "-rounds", "3")
	if st != 0 {
		t.Fatalf("status %d\n%s\n%s", st, out, errs)
	}
	if !strings.Contains(out, "# Rivet Fault-Tolerance Respawn Test: 3 ranks\n") {
		t.Errorf("output:\n%s", out)
	}
	for _, row := range []string{"spawn 1", "spawn 3", "recover: detect", "recover: shrink", "recover: spawn", "recover: merge", "recover: total"} {
		if !regexp.MustCompile(`\n` + row + ` +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +3\n`).MatchString(out) {
			t.Errorf("no %s row in\n%s", row, out)
		}
	}
	for _, bad := range [][]string{{"-rounds", "0"}, {"extra"}} {
		args := append([]string{"bench", "ft_respawn"}, bad...)
		if _, _, st := rivet(args...); st != 2 {
			t.Errorf("rivet %v: status %d, want 2", args, st)
		}
	}
}

// TestBenchIO: rivet bench io writes and reads IOR's patterns — shared
// file with and without a block-cyclic view, collective and independent,
// a file per process — checks every stamp it reads back, prints a line
// per repetition and IOR's summary, and refuses bad options.
func TestBenchIO(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-b", "64k", "-t", "16k", "-s", "4", "-c"},
		{"-b", "16k", "-t", "64k", "-s", "8", "-c", "-V", "-cb", "enable", "-cbsize", "8192"},
		{"-b", "64k", "-t", "64k", "-s", "2", "-F"},
		{"-np", "1", "-b", "256k", "-t", "64k"},
	} {
		np := "3"
		if args[0] == "-np" {
			np, args = args[1], args[2:]
		}
		all := append([]string{"bench", "-np", np, "io", "-i", "2", "-o", dir + "/f"}, args...)
		out, errs, st := rivet(all...)
		if st != 0 {
			t.Fatalf("rivet %v: status %d\n%s\n%s", all, st, out, errs)
		}
		for _, re := range []string{`\nwrite +[0-9.]+ +[0-9.]+ +1\n`, `\nread +[0-9.]+ +[0-9.]+ +1\n`, `\nSummary of all tests:\n`, `\nwrite( +[0-9.]+){4} +` + np + ` `} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("rivet %v: no %q in\n%s", all, re, out)
			}
		}
		if left, _ := filepath.Glob(dir + "/f*"); len(left) > 0 {
			t.Errorf("rivet %v left %v", all, left)
		}
	}
	for _, bad := range [][]string{{"-b", "0"}, {"-b", "10k", "-t", "3k"}, {"-V", "-F"}, {"-cb", "sometimes"}, {"extra"}} {
		args := append([]string{"bench", "io"}, bad...)
		if _, _, st := rivet(args...); st != 2 {
			t.Errorf("rivet %v: status %d, want 2", args, st)
		}
	}
}

// TestBenchmarkEnv: the benchmark commands re-execute themselves with
// asynchronous preemption off, unless GODEBUG already sets it either way;
// other commands do not re-execute.
func TestBenchmarkEnv(t *testing.T) {
	for _, tc := range []struct {
		args, environ []string
		want          []string // nil: no re-execution
	}{
		{[]string{"perf", "write_lat"}, []string{"A=1"}, []string{"A=1", "GODEBUG=asyncpreemptoff=1"}},
		{[]string{"bench", "osu_latency"}, []string{"GODEBUG=gctrace=1"}, []string{"GODEBUG=gctrace=1,asyncpreemptoff=1"}},
		{[]string{"perf", "write_lat"}, []string{"GODEBUG=asyncpreemptoff=0"}, nil},
		{[]string{"bench"}, []string{"GODEBUG=asyncpreemptoff=1"}, nil},
		{[]string{"devices"}, []string{"A=1"}, nil},
		{nil, nil, nil},
	} {
		env, ok := benchmarkEnv(tc.args, tc.environ)
		if ok != (tc.want != nil) || strings.Join(env, " ") != strings.Join(tc.want, " ") {
			t.Errorf("benchmarkEnv(%q, %q) = %q, %v; want %q", tc.args, tc.environ, env, ok, tc.want)
		}
	}
}

// asMain is the environment that makes the test binary run the whole
// command, re-execution included, with extra added and GODEBUG and
// GOMAXPROCS from the test's own environment left out.
func asMain(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") && !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	return append(append(env, "RIVET_TEST_AS_MAIN=1"), extra...)
}

// TestBenchRuntimeSettings runs the whole bench command on shared memory:
// its ranks run without asynchronous preemption, unless GODEBUG says
// otherwise, and with the runtime's monitor thread as it is — they are
// not pinned — unless RIVET_SYSMON=idle lowers it, and rank 0 says which.
func TestBenchRuntimeSettings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		// Pinned by default (-bind-to auto, 2 ranks), so the runtime's
		// monitor goes idle; unpinned it stays normal.
		{nil, nil, "async preemption off; sysmon idle"},
		{[]string{"-bind-to", "none"}, nil, "async preemption off; sysmon normal"},
		{[]string{"-bind-to", "none"}, []string{"GODEBUG=asyncpreemptoff=0", "RIVET_SYSMON=idle"}, "async preemption on; sysmon idle"},
	} {
		if len(tc.args) > 0 && runtime.NumCPU() < 2 {
			continue // unpinned on one CPU is confined all the same
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		args := append(append([]string{"bench"}, tc.args...), "osu_latency", "-m", "8:8", "-i", "50", "-x", "5")
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = asMain(tc.env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil || !strings.Contains(stdout.String(), "\n8 ") {
			t.Fatalf("%v %v: %v\n%s\n%s", tc.args, tc.env, err, stdout.String(), stderr.String())
		}
		if !strings.Contains(stderr.String(), "rank 1 over shm; "+tc.want+"\n") {
			t.Errorf("%v %v: stderr does not say %q:\n%s", tc.args, tc.env, tc.want, stderr.String())
		}
	}
}

// TestPerfRuntimeSettings runs the whole command, re-execution included,
// server and client over rxe, and reads the settings the client's header
// reports: GOMAXPROCS 1 and no asynchronous preemption by default, the
// runtime's monitor thread under SCHED_IDLE when each side is pinned to
// one CPU (as lab/perftest.sh runs them), and what the environment
// says when it says something.
func TestPerfRuntimeSettings(t *testing.T) {
	devs := testutil.RXEDevices(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to pin server and client apart")
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		pin  bool
		env  []string
		want string
	}{
		{true, nil, "GOMAXPROCS 1, async preemption off, sysmon idle"},
		{false, nil, "GOMAXPROCS 1, async preemption off, sysmon normal"},
		{true, []string{"GODEBUG=asyncpreemptoff=0", "GOMAXPROCS=2", "RIVET_SYSMON=normal"}, "GOMAXPROCS 2, async preemption on, sysmon normal"},
	} {
		port := fmt.Sprint(18900 + i)
		args := []string{"perf", "write_lat", "-d", devs[0], "-n", "100", "-p", port}
		// command runs this program with args, on CPU cpu if tc.pin.
		command := func(ctx context.Context, cpu string, args ...string) *exec.Cmd {
			if tc.pin {
				return exec.CommandContext(ctx, taskset, append([]string{"-c", cpu, os.Args[0]}, args...)...)
			}
			return exec.CommandContext(ctx, os.Args[0], args...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		srv := command(ctx, "1", args...)
		srv.Env = asMain(tc.env...)
		var srvOut bytes.Buffer
		srv.Stdout, srv.Stderr = &srvOut, &srvOut
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		cli := command(ctx, "0", append(args, "127.0.0.1")...)
		cli.Env = srv.Env
		out, err := cli.CombinedOutput()
		srvErr := srv.Wait()
		cancel()
		if err != nil || srvErr != nil {
			t.Fatalf("pinned %v, %v: client %v, server %v\n%s\n%s", tc.pin, tc.env, err, srvErr, out, srvOut.String())
		}
		if !strings.Contains(string(out), " Go runtime      : "+tc.want+"\n") || !strings.Contains(string(out), "t_typical[usec]") {
			t.Errorf("pinned %v, %v: the header does not say %q:\n%s", tc.pin, tc.env, tc.want, out)
		}
	}
}

// TestPerfInterrupt: with one thread and no asynchronous preemption, an
// interrupt still ends both sides of a latency test within its loop.
func TestPerfInterrupt(t *testing.T) {
	devs := testutil.RXEDevices(t)
	for i, test := range []string{"write_lat", "send_lat", "read_lat"} {
		args := []string{"perf", test, "-d", devs[0], "-n", "20000000", "-p", fmt.Sprint(18910 + i)}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv := exec.CommandContext(ctx, os.Args[0], args...)
		srv.Env = asMain()
		var srvOut, cliOut testutil.SyncBuffer
		srv.Stdout, srv.Stderr = &srvOut, &srvOut
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		cli := exec.CommandContext(ctx, os.Args[0], append(args, "127.0.0.1")...)
		cli.Env = srv.Env
		cli.Stdout, cli.Stderr = &cliOut, &cliOut
		if err := cli.Start(); err != nil {
			t.Fatal(err)
		}
		for !strings.Contains(cliOut.String(), "t_typical[usec]") { // then in the loop
			if ctx.Err() != nil {
				t.Fatalf("%s: no header:\n%s\n%s", test, cliOut.String(), srvOut.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		cli.Process.Signal(os.Interrupt)
		srv.Process.Signal(os.Interrupt)
		cliErr, srvErr := cli.Wait(), srv.Wait()
		d := time.Since(start)
		t.Logf("%s: both sides ended %v after the interrupt", test, d)
		if d > 2*time.Second {
			t.Errorf("%s: the interrupted processes took %v to exit", test, d)
		}
		if cliErr == nil || srvErr == nil || !strings.Contains(cliOut.String(), "context canceled") {
			t.Errorf("%s: client %v, server %v:\n%s\n%s", test, cliErr, srvErr, cliOut.String(), srvOut.String())
		}
	}
}

// TestPlot: rivet plot draws real outputs, reads rivet bench -format
// json and csv, and names the file and line of bad input.
func TestPlot(t *testing.T) {
	td := filepath.Join("..", "..", "bench", "results", "testdata")
	out, errs, st := rivet("plot", "-label", "Rivet,Open MPI", filepath.Join(td, "rivet-osu_latency.txt"), filepath.Join(td, "ompi-osu_latency.txt"))
	if st != 0 || !strings.HasPrefix(out, "<?xml") || !strings.Contains(out, "Open MPI") || !strings.Contains(out, "Rivet / Open MPI") {
		t.Fatalf("status %d, stderr %s, output %.300s", st, errs, out)
	}
	dir := t.TempDir()
	for _, format := range []string{"json", "csv"} {
		res, errs, st := rivet("bench", "-format", format, "osu_latency", "-m", "1:64", "-i", "50", "-x", "5")
		if st != 0 {
			t.Fatalf("bench -format %s: status %d\n%s", format, st, errs)
		}
		f := filepath.Join(dir, "lat."+format)
		if err := os.WriteFile(f, []byte(res), 0o644); err != nil {
			t.Fatal(err)
		}
		png := filepath.Join(dir, format+".png")
		if _, errs, st := rivet("plot", "-o", png, f); st != 0 {
			t.Fatalf("plot of -format %s: status %d\n%s\n%s", format, st, errs, res)
		}
		if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("-o %s: %v, %.8q", png, err, b)
		}
	}
	// The result files behind docs/performance.md's pictures stay
	// readable (lab/plots.sh draws them).
	mine, _ := filepath.Glob(filepath.Join("..", "..", "docs", "results", "*.rivet.txt"))
	if len(mine) == 0 {
		t.Error("no docs/results/*.rivet.txt")
	}
	for _, a := range mine {
		others, _ := filepath.Glob(strings.TrimSuffix(a, "rivet.txt") + "*.txt")
		if _, errs, st := rivet(append([]string{"plot", "-o", filepath.Join(dir, "doc.svg")}, others...)...); st != 0 {
			t.Errorf("%s: status %d, %s", a, st, errs)
		}
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("# OSU MPI Latency Test v7.4\n# Size          Latency (us)\n1   0.5\n2   n/a\n"), 0o644)
	if _, errs, st := rivet("plot", bad); st != 1 || !strings.Contains(errs, "bad.txt:4: \"n/a\" is not a number") {
		t.Errorf("bad input: status %d, stderr %q", st, errs)
	}
	if _, errs, st := rivet("plot", "-label", "a,b", bad); st != 2 || !strings.Contains(errs, "-label names 2 series, for 1 files") {
		t.Errorf("labels: status %d, stderr %q", st, errs)
	}
	if _, errs, st := rivet("bench", "-format", "xml", "osu_latency"); st != 2 || !strings.Contains(errs, `-format "xml"`) {
		t.Errorf("-format xml: status %d, stderr %q", st, errs)
	}
}

// TestBenchProgress: rivet bench shows its progress on a terminal, and
// nothing of it in a pipe, where the output is OSU's alone.
func TestBenchProgress(t *testing.T) {
	args := []string{"bench", "osu_latency", "-m", "1:64", "-i", "50", "-x", "5"}
	term, reader := testutil.Pty(t)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RIVET_TEST_AS_CLI=1", "TERM=xterm")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, term
	got := make(chan string)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, reader) // (until the terminal side closes: EIO)
		got <- b.String()
	}()
	err := cmd.Run()
	term.Close()
	seen := <-got
	if err != nil {
		t.Fatalf("%v\n%s", err, seen)
	}
	if !strings.Contains(seen, "\r\x1b[Kosu_latency: 1 bytes (1 of 7), ") || !strings.Contains(seen, "\r\x1b[K") {
		t.Errorf("no progress on the terminal: %q", seen)
	}
	if strings.Contains(stdout.String(), "\r") {
		t.Errorf("progress in the output: %q", stdout.String())
	}

	cmd = exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RIVET_TEST_AS_CLI=1", "TERM=xterm")
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &errb // (a pipe each)
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if strings.Contains(errb.String(), "\r") || strings.Contains(errb.String(), "of 7") {
		t.Errorf("progress in a pipe: %q", errb.String())
	}
}
