//go:build linux

package ft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/launch"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// Tests run programs as the ranks of a job (internal/jobtest): over
// shared memory on the host, and over verbs in the soft-RoCE VM.
var progs = jobtest.Programs[*fabric.Endpoint]{
	Env:     "RIVET_FT_PROG",
	Init:    func(ctx context.Context) (*fabric.Endpoint, error) { return fabric.Init(ctx) },
	Close:   (*fabric.Endpoint).Close,
	Rank:    func(ep *fabric.Endpoint) int { return ep.World().Rank() },
	Timeout: 240 * time.Second,
}

func TestMain(m *testing.M) { progs.Main(m) }

var (
	failf = jobtest.Failf
	must  = jobtest.Must
)

// ways are the providers a test runs over: shared memory on the host;
// verbs alone (every peer over RDMA loopback) in the VM.
func ways(t *testing.T) []struct {
	name string
	env  []string
} {
	type way = struct {
		name string
		env  []string
	}
	if os.Getenv("RIVET_RXE_DEVICES") == "" && os.Getenv(testutil.RequireEnv) != "1" {
		return []way{{"shm", []string{"RIVET_PROVIDER=shm"}}}
	}
	devs := testutil.RXEDevices(t)
	return []way{{"verbs", []string{"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + devs[0]}}}
}

func init() {
	progs.Add("stop", progStop)
	progs.Add("compute", progCompute)
}

// victim is the rank the failure tests stop or kill.
func victim(n int) int { return n / 2 }

// progStop: the victim stops itself (SIGSTOP) once every rank's detector
// runs. Every survivor learns that it failed — its observer convicts it,
// the others hear of it — and then one sends it SIGCONT: fenced out, it
// ends with fabric.ExitDeclaredFailed. With FT_TEST_CONT=0 nobody
// continues it: the launcher has to end it.
func progStop(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me, n, v := w.Rank(), w.Size(), victim(w.Size())
	cont := os.Getenv("FT_TEST_CONT") != "0"
	throttleOdd(ep)
	d, err := Start(ctx, ep, matrixOptions())
	must(err, "start")
	defer d.Stop()
	var pid [8]byte
	if me == v && cont {
		binary.LittleEndian.PutUint64(pid[:], uint64(os.Getpid()))
		must(w.Send(ctx, pid[:], 0, 1), "send pid")
	} else if me == 0 && cont {
		_, err := w.Recv(ctx, pid[:], v, 1)
		must(err, "recv pid")
		// Whatever happens here, the victim is not left stopped (the job
		// would wait for it forever).
		defer syscall.Kill(int(binary.LittleEndian.Uint64(pid[:])), syscall.SIGCONT)
	}
	must(collectives.Barrier(ctx, w), "barrier")
	if me == v {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		// Continued: the heartbeat's thread ends this process within a
		// period.
		time.Sleep(30 * time.Second)
		failf("still running 30 s after SIGCONT")
	}
	t0 := time.Now()
	for ep.State(v) != fabric.Failed {
		if time.Since(t0) > 60*time.Second {
			failf("world rank %d still %v after 60 s", v, ep.State(v))
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("knew after %v\n", time.Since(t0).Round(time.Millisecond))
	if me == (v+1)%n {
		// The observer convicted it: its errors say why.
		if _, err := w.Recv(ctx, pid[:], v, 5); !errors.Is(err, fabric.ErrProcFailed) || !errors.Is(err, ErrSuspected) {
			failf("receive from the convicted rank: %v, want ErrProcFailed and ErrSuspected", err)
		}
	}
	if got := ep.Failed(); len(got) != 1 || got[0] != v {
		var why []string // what made each known failed, for the log
		for _, r := range got {
			_, err := ep.Heartbeat(r)
			why = append(why, fmt.Sprintf("%d: %v", r, err))
		}
		failf("known failed %v, want [%d]; causes %q", got, v, why)
	}
	// (Others may have finished and closed — stopped — by now; none is
	// failed.)
	for r := 0; r < n; r++ {
		if s := ep.State(r); r != me && (r == v) != (s == fabric.Failed) {
			failf("world rank %d is %v", r, s)
		}
	}
	if me == 0 && cont {
		syscall.Kill(int(binary.LittleEndian.Uint64(pid[:])), syscall.SIGCONT)
	}
	// The survivors still talk.
	peer := (me + 1) % n
	if peer == v {
		peer = (peer + 1) % n
	}
	from := (me - 1 + n) % n
	if from == v {
		from = (from - 1 + n) % n
	}
	var got [1]byte
	_, err = w.Sendrecv(ctx, []byte{byte(me)}, peer, 2, got[:], from, 2)
	must(err, "survivors' sendrecv")
	return nil
}

func TestStopped(t *testing.T) {
	for _, way := range ways(t) {
		for _, n := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/%d", way.name, n), func(t *testing.T) {
				// The launcher would kill the stopped rank FenceGrace after
				// the first verdict; here the test continues it first.
				o := launch.Options{N: n, FT: true, FenceGrace: 10 * time.Minute, Env: way.env}
				out, errs, st := progs.RunWith(t, o, "stop")
				if st != fabric.ExitDeclaredFailed || !strings.Contains(errs, "was declared failed") {
					t.Fatalf("status %d, want %d (the stopped rank, fenced out)\n%s\n%s", st, fabric.ExitDeclaredFailed, out, errs)
				}
				v := victim(n)
				for r := 0; r < n; r++ {
					if r != v && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
						t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
					}
				}
				t.Logf("every survivor learned of the stopped rank: %v", knew(out))
			})
		}
	}
}

// TestLauncherKills: a rank declared failed that cannot end itself — it
// stays stopped — is killed by the launcher (rivetrun -ft) once the
// fence grace has passed.
func TestLauncherKills(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			start := time.Now()
			out, errs, st := progs.Run(t, 4, "stop", true, append([]string{"FT_TEST_CONT=0"}, way.env...)...)
			v := victim(4)
			want := fmt.Sprintf("rivetrun: rank %d, declared failed by the other ranks", v)
			if st != 128+int(syscall.SIGKILL) || !strings.Contains(errs, want) || !strings.Contains(errs, "killing it (-ft)") {
				t.Fatalf("status %d, want %d with %q (the launcher killed the stopped rank)\n%s\n%s", st, 128+int(syscall.SIGKILL), want, out, errs)
			}
			for r := 0; r < 4; r++ {
				if r != v && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
				}
			}
			t.Logf("killed; the job took %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// knew collects the "knew after" times the ranks printed.
func knew(out string) []string {
	var ts []string
	for _, m := range regexp.MustCompile(`knew after (\S+)`).FindAllStringSubmatch(out, -1) {
		ts = append(ts, m[1])
	}
	return ts
}

// progCompute: no false positive. Rank 1 computes for 5 s without a call
// into the library, confined to one CPU with GOMAXPROCS 1 (the job's),
// while the others wait for it in a barrier; every rank's detector runs
// throughout, and afterwards nobody is known failed or stalled.
func progCompute(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	d, err := Start(ctx, ep, Options{})
	must(err, "start")
	must(collectives.Barrier(ctx, w), "barrier")
	if w.Rank() == 1 {
		x := uint64(1)
		for t0 := time.Now(); time.Since(t0) < 5*time.Second; {
			for i := 0; i < 1<<20; i++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		if x == 0 {
			fmt.Println("unlikely")
		}
	}
	must(collectives.Barrier(ctx, w), "barrier after the computation")
	d.Stop()
	if f := ep.Failed(); len(f) != 0 {
		failf("known failed: %v", f)
	}
	// (Others may have finished and closed — stopped — by now. Stalled
	// is a passing suspicion a loaded machine may cause, not a verdict.)
	for r := 0; r < w.Size(); r++ {
		if s := ep.State(r); s == fabric.Failed {
			failf("world rank %d is %v", r, s)
		}
	}
	return nil
}

func TestNoFalsePositive(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) {
			env := append([]string{progs.Env + "=compute", "GOMAXPROCS=1"}, way.env...)
			jobtest.BoundJobOK(t, 4, env...)
		})
	}
}

func init() { progs.Add("quit", progQuit) }

// progQuit: a rank that closes its endpoint is stopped, not failed — even
// while its process lives on for a second after, its heartbeat stopped,
// under every other rank's detector.
func progQuit(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	d, err := Start(ctx, ep, Options{})
	must(err, "start")
	must(collectives.Barrier(ctx, w), "barrier")
	if w.Rank() == 1 {
		d.Stop()
		must(ep.Close(), "close")
		time.Sleep(time.Second)
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for ep.State(1) != fabric.Stopped {
		if time.Now().After(deadline) {
			failf("world rank 1 is %v a minute after it closed", ep.State(1))
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // past the detector's timeout, and its exit
	if s := ep.State(1); s != fabric.Stopped || len(ep.Failed()) != 0 {
		failf("world rank 1 closed and is %v; known failed %v", s, ep.Failed())
	}
	d.Stop()
	return nil
}

func TestQuit(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) { progs.OK(t, 3, "quit", way.env...) })
	}
}

func init() { progs.Add("forget", progForget) }

// progForget: a detector left running when its endpoint closes stops
// by itself, touching nothing Close released.
func progForget(ctx context.Context, ep *fabric.Endpoint) error {
	d, err := Start(ctx, ep, Options{})
	must(err, "start")
	must(collectives.Barrier(ctx, ep.World()), "barrier")
	must(ep.Close(), "close")
	time.Sleep(100 * time.Millisecond) // ticks against the closed endpoint
	done := make(chan struct{})
	go func() { d.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		failf("the detector did not stop after its endpoint closed")
	}
	return nil
}

func TestDetectorOutlivesEndpoint(t *testing.T) {
	for _, way := range ways(t) {
		t.Run(way.name, func(t *testing.T) { progs.OK(t, 3, "forget", way.env...) })
	}
}

// TestExitStatus: the launcher counts a rank that ends by its peers'
// verdict as failed, by the status the fabric gives it.
func TestExitStatus(t *testing.T) {
	if fabric.ExitDeclaredFailed != launch.ExitDeclaredFailed {
		t.Fatalf("fabric.ExitDeclaredFailed %d, launch.ExitDeclaredFailed %d", fabric.ExitDeclaredFailed, launch.ExitDeclaredFailed)
	}
}
