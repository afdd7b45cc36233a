//go:build linux

package main

import (
	"bufio"
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
	// of ring heads, and the first page of a ring (4 KiB) for each peer
	// that sends to it — the peers of the failure notices' and the
	// revoke's binomial graph (2 log₂ n), of the trees of agreements and
	// communicator creation (log₂ n + 1), a few more — and rank 0 hears
	// from every rank (the results). A ring per pair would be 1.3 GiB;
	// the design of before took 16 GiB. It must fit Docker's 64 MiB.
	node256Shm = 256*(16+4+(3*8+4)*4)<<10 + 256*4<<10
	// Open MPI 4.1's ranks running the same loops (vader) held 533 MiB
	// in all on this machine (lab/scale.sh). A Go process starts at
	// about 2.5 MiB; the bound leaves room for the runtime's collector,
	// whose heap may reach 4 MiB before it first runs.
	node256Pss = 1280 << 20
)

// TestHostNode256: 256 processes on this node (oversubscribed, as CI's 2
// CPUs are), in a /dev/shm of Docker's default 64 MiB, run osu_barrier
// and 8-byte osu_allreduce, and the recovery steps after a SIGKILL
// (ft_recover -failure: agree, shrink, revoke, and a shrink once the last
// rank is dead), each job within memory bounds sampled while it runs:
// the /dev/shm blocks of its segments and its ranks' PSS, each rank's
// peak, summed.
func TestHostNode256(t *testing.T) {
	if testutil.Race {
		t.Skip("256 processes under the race detector take gigabytes; scripts/test.sh runs this test on its own, without -race")
	}
	if testutil.ShmNamespace(t, 64<<20) {
		return
	}
	const n = 256
	for _, job := range [][]string{
		// Long enough for a sample, a look at every rank that takes
		// about a second here, to see each of them.
		{"osu_barrier", "-i", "1000", "-x", "5"},
		{"osu_allreduce", "-m", "8:8", "-i", "1000", "-x", "5"},
		{"ft_recover", "-i", "4", "-x", "1", "-failure"},
	} {
		t.Run(job[0], func(t *testing.T) {
			var out, errs string
			var st int
			peak := sampleJob(func() {
				out, errs, st = rivet(append([]string{"bench", "-np", strconv.Itoa(n)}, job...)...)
			})
			if st != 0 {
				t.Fatalf("%v on %d ranks: status %d\n%s\n%s", job, n, st, out, errs)
			}
			t.Logf("%d ranks, their peaks summed: /dev/shm %.1f MiB, PSS %.0f MiB (largest rank %.1f MiB), %d samples\n%s",
				peak.ranks, mib(peak.shm), mib(peak.pss), mib(peak.rank), peak.samples, out)
			if peak.ranks < n {
				t.Fatalf("saw %d ranks, want %d", peak.ranks, n)
			}
			if peak.shm > node256Shm || peak.pss > node256Pss {
				t.Errorf("%v: /dev/shm %.1f MiB (bound %.0f), summed PSS %.0f MiB (bound %.0f)",
					job, mib(peak.shm), mib(node256Shm), mib(peak.pss), mib(node256Pss))
			}
		})
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// jobPeak is the most a job's ranks — this process's children — held:
// for each rank the most it was seen to hold, summed over the ranks. A
// sum of each rank's peak is at least the job's peak at any one moment,
// and it needs each rank seen, not every rank seen at once.
type jobPeak struct {
	shm, pss int64 // bytes: their segments' /dev/shm blocks, their PSS
	rank     int64 // the largest PSS of one rank
	ranks    int   // ranks seen
	samples  int
}

// sampleJob runs job while sampling this process's children every
// 200 ms, and returns the peaks.
func sampleJob(job func()) jobPeak {
	shm, pss := map[int]int64{}, map[int]int64{}
	var p jobPeak
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			sampleChildren(shm, pss)
			p.samples++
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
	for pid, v := range pss {
		p.pss += v
		p.shm += shm[pid]
		p.rank = max(p.rank, v)
	}
	p.ranks = len(pss)
	return p
}

// sampleChildren raises, for each child of this process, its entries in
// shm — the /dev/shm blocks of the Rivet segment it holds open (each rank
// keeps its own open, unlinked) — and in pss, to what it holds now.
func sampleChildren(shm, pss map[int]int64) {
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
		if len(f) < 2 || f[1] != me || err != nil {
			continue
		}
		if r := rollupPss(d + "/smaps_rollup"); r > 0 {
			pss[pid] = max(pss[pid], r)
		}
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
}

// rollupPss is the Pss line of a smaps_rollup file, in bytes.
func rollupPss(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
