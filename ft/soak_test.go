//go:build linux

package ft

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/launch"
	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/op"
)

func init() { progs.Add("soak", progSoak) }

// soakFor is how long TestSoak keeps every rank busy.
const soakFor = 60 * time.Second

// progSoak: no false positive under load. For a minute, with the default
// settings and every rank's detector running, each rank alternates bursts
// of computation outside the library (up to half a second) with
// allreduces; two ranks share each CPU with a busy process of the same
// priority (TestSoak's). Afterwards nobody is known failed.
func progSoak(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	d, err := Start(ctx, ep, Options{})
	must(err, "start")
	rng := rand.New(rand.NewPCG(uint64(w.Rank()), 7))
	x := uint64(1)
	in, out := []int64{1}, []int64{0}
	for t0 := time.Now(); ; {
		// Every rank decides together when to stop: rank 0's clock.
		stop, all := []int64{0}, []int64{0}
		if w.Rank() == 0 && time.Since(t0) > soakFor {
			stop[0] = 1
		}
		must(collectives.Allreduce(ctx, w, stop, all, op.Max[int64]()), "allreduce")
		if all[0] == 1 {
			break
		}
		for burst := time.Now(); time.Since(burst) < time.Duration(rng.IntN(500))*time.Millisecond; {
			for i := 0; i < 1<<16; i++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		must(collectives.Allreduce(ctx, w, in, out, op.Sum[int64]()), "allreduce")
		if out[0] != int64(w.Size()) {
			failf("allreduce: %d", out[0])
		}
	}
	d.Stop()
	if f := ep.Failed(); len(f) != 0 || x == 0 {
		failf("known failed after the soak: %v", f)
	}
	return nil
}

func TestSoak(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			testutil.CPUHogs(t)
			jobtest.BoundJobOK(t, 4, append([]string{progs.Env + "=soak"}, way.env...)...)
		})
	}
}

// cgroupEnv names, in a test program's environment, the cgroup.procs file
// of a CPU quota (testutil.CPUQuota) that the odd ranks join after Init.
const cgroupEnv = "RIVET_FT_TEST_CGROUP"

// throttleOdd moves this rank into cgroupEnv's group if its world rank
// is odd: in the detector's ring each odd rank is then observed by an
// even one, which runs freely while it waits, runnable, for CPU time.
func throttleOdd(ep *fabric.Endpoint) {
	if procs := os.Getenv(cgroupEnv); procs != "" && ep.World().Rank()%2 == 1 {
		must(testutil.JoinCgroup(procs), "join the throttled cgroup")
	}
}

func init() { progs.Add("throttled", progThrottled) }

// throttledFor is how long progThrottled runs.
const throttledFor = 6 * time.Second

// progThrottled: a process the kernel keeps from running is not failed.
// The odd ranks share a CPU quota that throttles them for most of every
// period — runnable, their heartbeat threads too, but silent for far
// longer than the timeout — while the even ranks, which observe them,
// run freely. For 6 s every rank alternates computation with allreduces,
// with the default settings. Each observer measures the longest stretch
// its process stayed stalled (the test's premise: longer than the
// timeout, or it proves nothing); afterwards nobody is known failed.
func progThrottled(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	throttleOdd(ep)
	d, err := Start(ctx, ep, Options{})
	must(err, "start")
	var longest time.Duration
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		// The longest stretch the observed process stayed stalled.
		defer close(watched)
		var since time.Time
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			obs := d.Observing()
			if obs >= 0 && ep.State(obs) == fabric.Stalled {
				if since.IsZero() {
					since = time.Now()
				}
				longest = max(longest, time.Since(since))
			} else {
				since = time.Time{}
			}
		}
	}()
	x := uint64(1)
	in, out := []int64{1}, []int64{0}
	for t0 := time.Now(); ; {
		stop, all := []int64{0}, []int64{0}
		if w.Rank() == 0 && time.Since(t0) > throttledFor {
			stop[0] = 1
		}
		must(collectives.Allreduce(ctx, w, stop, all, op.Max[int64]()), "allreduce")
		if all[0] == 1 {
			break
		}
		for burst := time.Now(); time.Since(burst) < 20*time.Millisecond; {
			for i := 0; i < 1<<12; i++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		must(collectives.Allreduce(ctx, w, in, out, op.Sum[int64]()), "allreduce")
	}
	close(done)
	<-watched
	d.Stop()
	if f := ep.Failed(); len(f) != 0 || x == 0 {
		var why []string // what made each known failed, for the log
		for _, r := range f {
			_, err := ep.Heartbeat(r)
			why = append(why, fmt.Sprintf("%d: %v", r, err))
		}
		failf("known failed under the quota: %v; causes %q", f, why)
	}
	if w.Rank()%2 == 0 {
		fmt.Printf("longest stall %v\n", longest.Round(time.Millisecond))
	}
	return nil
}

// TestThrottled: a CPU quota (cgroup cpu.max, as a batch system sets one)
// throttles half the job for some 475 ms of every 500 ms. No live process is
// convicted, though its heartbeat stood still for more than twice the
// timeout (the detector asks the kernel, which says it waits to run);
// and under the same quota a SIGSTOPped and a SIGKILLed rank are still
// found — the stopped one observed by a throttled rank, whose own looks
// come late.
func TestThrottled(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			procs := testutil.CPUQuota(t, 50*time.Millisecond, 500*time.Millisecond)
			env := append([]string{cgroupEnv + "=" + procs}, way.env...)
			out := progs.OK(t, 4, "throttled", env...)
			stalls := regexp.MustCompile(`longest stall (\S+)`).FindAllStringSubmatch(out, -1)
			var longest time.Duration
			for _, m := range stalls {
				d, err := time.ParseDuration(m[1])
				if err != nil {
					t.Fatalf("%q: %v", m[0], err)
				}
				longest = max(longest, d)
			}
			if len(stalls) != 2 || longest <= DefaultTimeout {
				t.Fatalf("the observers' longest stalls %q: want one longer than the %v timeout (else the quota starved nobody)\n%s",
					stalls, DefaultTimeout, out)
			}
			t.Logf("live ranks stalled up to %v, none convicted", longest)

			o := launch.Options{N: 4, FT: true, FenceGrace: 10 * time.Minute, Env: env}
			o2, errs, st := progs.RunWith(t, o, "stop")
			if st != fabric.ExitDeclaredFailed {
				t.Fatalf("stopped: status %d, want %d\n%s\n%s", st, fabric.ExitDeclaredFailed, o2, errs)
			}
			t.Logf("stopped: every survivor knew after %v", knew(o2))
			o3, errs, st := progs.Run(t, 4, "kill", true, env...)
			if st != 128+9 {
				t.Fatalf("killed: status %d, want 137\n%s\n%s", st, o3, errs)
			}
			t.Logf("killed: every survivor knew after %v", knew(o3))
		})
	}
}
