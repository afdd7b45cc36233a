//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// The bounds TestHostNode256 holds a node of 256 processes to, for each
// of its jobs.
const (
	// Per process: its segment's header and ring slots (16 KiB), a page
	// of ring heads, and the first page of a ring (4 KiB, 16 frames; it
	// grows 16 KiB at a time only while a peer's frames fill it the
	// first time) for each peer that sends to it — the peers of the
	// failure notices' and the revoke's binomial graph (2 log₂ n), of the
	// trees of agreements and communicator creation (log₂ n + 1), a few
	// more — and rank 0 hears from every rank (the results). A ring per
	// pair would be 1.3 GiB; the design of before took 16 GiB. It must
	// fit Docker's 64 MiB.
	node256Shm = 256*(16+4+(3*8+4)*4)<<10 + 256*4<<10
	// Open MPI 4.1's ranks running the same loops (vader) held 533 MiB
	// in all on this machine (lab/scale.sh). A Go process starts at
	// about 2.5 MiB; the bound leaves room for the runtime's collector,
	// whose heap may reach 4 MiB before it first runs.
	node256Mem = 1280 << 20
)

// TestHostNode256: 256 processes on this node (oversubscribed, as CI's 2
// CPUs are), in a /dev/shm of Docker's default 64 MiB, run osu_barrier
// and 8-byte osu_allreduce, and the recovery steps after a SIGKILL
// (ft_recover -failure: agree, shrink, revoke, and a shrink once the last
// rank is dead), each job within memory bounds sampled while it runs:
// the /dev/shm blocks of its segments and its ranks' memory (jobPeak).
func TestHostNode256(t *testing.T) {
	if testutil.Race {
		t.Skip("256 processes under the race detector take gigabytes; scripts/test.sh runs this test on its own, without -race")
	}
	if testutil.ShmNamespace(t, 64<<20) {
		return
	}
	const n = 256
	for _, job := range [][]string{
		// Jobs of a few seconds, so that a rank's peak is likely seen
		// during the loops, not only at the end (sampleJob).
		{"osu_barrier", "-i", "1000", "-x", "5"},
		{"osu_allreduce", "-m", "8:8", "-i", "1000", "-x", "5"},
		{"ft_recover", "-i", "4", "-x", "1", "-failure"},
	} {
		t.Run(job[0], func(t *testing.T) {
			hold := t.TempDir()
			t.Setenv(holdEnv, hold)
			var out, errs string
			var st int
			peak := sampleJob(hold, func() {
				out, errs, st = rivet(append([]string{"bench", "-np", strconv.Itoa(n)}, job...)...)
			})
			if st != 0 {
				t.Fatalf("%v on %d ranks: status %d\n%s\n%s", job, n, st, out, errs)
			}
			t.Logf("%d ranks: /dev/shm %.1f MiB; private memory %.0f MiB (largest rank %.1f MiB) and shared %.0f MiB; %d samples\n%s",
				peak.ranks, mib(peak.shm), mib(peak.private), mib(peak.rank), mib(peak.shared), peak.samples, out)
			want := n
			if job[len(job)-1] == "-failure" {
				want-- // killed on purpose
			}
			if peak.held != want {
				t.Fatalf("%d ranks held at the end, want %d", peak.held, want)
			}
			if mem := peak.private + peak.shared; peak.shm > node256Shm || mem > node256Mem {
				t.Errorf("%v: /dev/shm %.1f MiB (bound %.0f), memory %.0f MiB (bound %.0f)",
					job, mib(peak.shm), mib(node256Shm), mib(mem), mib(node256Mem))
			}
		})
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// jobPeak is the most a job's ranks — this process's children — held at
// any one moment, bounded from above by what was seen: each rank's peak of
// private memory, summed, plus the most the ranks' shares of their shared
// pages (PSS less private memory: the binary, the segments) came to in
// one sample. A rank's PSS alone will not do: a rank seen when few had
// started holds a large share of the binary's pages, and summing such
// peaks would count the binary many times over.
type jobPeak struct {
	shm     int64 // bytes: the /dev/shm blocks of the ranks' segments
	private int64 // bytes: each rank's peak private memory, summed
	shared  int64 // bytes: the most the shares of shared pages summed to
	rank    int64 // bytes: the largest private memory of one rank
	ranks   int   // ranks seen
	held    int   // ranks seen holding at the end, all at once
	samples int
}

// holdEnv names a directory in which each rank of a bench job, its tests
// done and its endpoint still open, leaves a file named for its pid and
// waits for a file named "release" (holdRank).
const holdEnv = "RIVET_TEST_HOLD"

func holdRank(dir string) {
	parent := os.Getppid()
	if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), nil, 0o644); err != nil {
		return
	}
	for os.Getppid() == parent { // and not once the test is gone
		if _, err := os.Stat(filepath.Join(dir, "release")); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sampleJob runs job, whose ranks hold at the end (holdEnv set to hold),
// while sampling this process's children every 200 ms, and returns the
// peaks. It releases the ranks after a sample in which every child was
// holding, so each rank that lives to the end is seen, however short its
// life before (the last of 256 to start may live a second).
func sampleJob(hold string, job func()) jobPeak {
	shm, private := map[int]int64{}, map[int]int64{}
	var p jobPeak
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		released := false
		for {
			holding := holders(hold)
			seen, shared := sampleChildren(shm, private)
			p.shared = max(p.shared, shared)
			p.samples++
			if !released && len(seen) > 0 && allIn(seen, holding) {
				p.held = len(seen)
				os.WriteFile(filepath.Join(hold, "release"), nil, 0o644)
				released = true
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	job()
	close(done)
	wg.Wait()
	for pid, v := range private {
		p.private += v
		p.shm += shm[pid]
		p.rank = max(p.rank, v)
	}
	p.ranks = len(private)
	return p
}

// holders are the pids that have left a file in dir.
func holders(dir string) map[int]bool {
	h := map[int]bool{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			h[pid] = true
		}
	}
	return h
}

func allIn(pids []int, set map[int]bool) bool {
	for _, pid := range pids {
		if !set[pid] {
			return false
		}
	}
	return true
}

// sampleChildren raises, for each live child of this process, its entries
// in shm — the /dev/shm blocks of the Rivet segment it holds open (each
// rank keeps its own open, unlinked) — and in private, to what it holds
// now. It returns the children it saw and their shares of shared pages,
// summed.
func sampleChildren(shm, private map[int]int64) (seen []int, shared int64) {
	me := strconv.Itoa(os.Getpid())
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// After the command's closing parenthesis: state, then ppid.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		pid, err := strconv.Atoi(filepath.Base(d))
		if len(f) < 2 || f[1] != me || f[0] == "Z" || err != nil {
			continue
		}
		r, ok := readRollup(d + "/smaps_rollup")
		if !ok {
			continue // gone
		}
		seen = append(seen, pid)
		priv := r["Private_Clean"] + r["Private_Dirty"]
		private[pid] = max(private[pid], priv)
		shared += r["Pss"] - priv
		fds, _ := os.ReadDir(d + "/fd")
		for _, fd := range fds {
			target, err := os.Readlink(d + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(target, "/dev/shm/rivet-") {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(d+"/fd/"+fd.Name(), &st) == nil {
				shm[pid] = max(shm[pid], st.Blocks*512)
			}
		}
	}
	return seen, shared
}

// readRollup reads a smaps_rollup file's fields, in bytes; false if the
// process is gone.
func readRollup(path string) (map[string]int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return nil, false
	}
	r := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if f := strings.Fields(v); ok && len(f) == 2 && f[1] == "kB" {
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			r[k] = kb << 10
		}
	}
	return r, true
}
