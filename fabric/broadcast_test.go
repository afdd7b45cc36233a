//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// In progMidBroadcast, world rank initiator declares world rank accused
// failed and dies having told one neighbour.
const (
	initiator = 0
	accused   = 5
	// knewDirEnv names a directory where each rank that learned of the
	// verdict leaves a file: the initiator dies once one is there.
	knewDirEnv = "FABRIC_TEST_KNEW_DIR"
)

func init() {
	progs.Add("midbroadcast", progMidBroadcast)
	progs.BeforeInit("midbroadcast", func() { dieMidBroadcast(initiator, accused) })
}

// dieMidBroadcast makes world rank r, if this process is it, die in its
// first broadcast once the first neighbour it told (other than skip)
// has left a mark in knewDirEnv's directory: it told that one, and no
// other.
func dieMidBroadcast(r, skip int) {
	if os.Getenv("PMI_RANK") != fmt.Sprint(r) {
		return
	}
	testHookNoticeSent = func(t int) {
		if t == skip {
			return
		}
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if names, _ := filepath.Glob(filepath.Join(os.Getenv(knewDirEnv), "*")); len(names) > 0 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
		fmt.Fprintf(os.Stderr, "rank %d: neighbour %d never learned of it\n", r, t)
		os.Exit(3)
	}
}

// leaveMark tells a dying initiator (dieMidBroadcast) this rank knows.
func leaveMark(me int) {
	must(os.WriteFile(filepath.Join(os.Getenv(knewDirEnv), fmt.Sprint(me)), nil, 0o644), "leave a mark")
}

// providerEnv is the environment that puts a job's ranks on way: "shm"
// (shared memory), or "verbs" (over the VM's first soft-RoCE device;
// skipped where there is none).
func providerEnv(t *testing.T, way string) []string {
	if way == "verbs" {
		return []string{"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + testutil.RXEDevices(t)[0]}
	}
	return []string{"RIVET_PROVIDER=shm"}
}

// testInitiatorDies runs prog on 8 ranks with every failure source off,
// over shared memory and verbs, and checks that the world ranks in dead
// died and every rank but those and the ones in spared finished.
func testInitiatorDies(t *testing.T, prog string, dead []int, spared ...int) {
	for _, way := range []string{"shm", "verbs"} {
		t.Run(way, func(t *testing.T) {
			env := providerEnv(t, way)
			const n = 8
			env = append(env, "RIVET_FT_SOURCES=none", knewDirEnv+"="+t.TempDir())
			out, errs, st := runJob(t, n, prog, true, env...)
			for _, d := range dead {
				if !strings.Contains(errs, fmt.Sprintf("rank %d was killed by signal 9", d)) {
					t.Fatalf("rank %d did not die mid-broadcast (status %d)\n%s\n%s", d, st, out, errs)
				}
			}
			for r := 0; r < n; r++ {
				if !slices.Contains(dead, r) && !slices.Contains(spared, r) && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
				}
			}
		})
	}
}

// progMidBroadcast: with every failure source off, so that notices are
// the only way to learn, the initiator declares the accused failed and
// dies after its first notice arrived. Every other rank still learns of
// the verdict: the neighbour that got it passes it on.
func progMidBroadcast(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	// Every pair connected: a notice to an unconnected peer would wait
	// for a handshake the dying initiator never finishes.
	connectAll(ctx, w)
	switch me {
	case initiator:
		for r := 0; r < n; r++ {
			if r != initiator {
				_, err := w.Recv(ctx, nil, r, 98)
				must(err, "ready")
			}
		}
		must(ep.MarkFailed(accused, errors.New("declared by the test")), "MarkFailed")
		failf("still alive after declaring")
	default:
		must(w.Send(ctx, nil, initiator, 98), "ready")
	}
	switch me {
	case accused:
		// Fenced out: its heartbeat thread ends it.
		time.Sleep(time.Minute)
		failf("accused, and still running a minute later")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := w.Recv(ctx, make([]byte, 1), accused, 9); !errors.Is(err, ErrProcFailed) {
		failf("receive from the accused: %v, want ErrProcFailed", err)
	}
	leaveMark(me)
	if f := ep.Failed(); len(f) != 1 || f[0] != accused {
		failf("known failed %v, want [%d] (nothing tells of the initiator's death)", f, accused)
	}
	return nil
}

// TestInitiatorDies: a broadcast whose initiator dies mid-way still
// reaches every survivor, over shared memory and over verbs.
func TestInitiatorDies(t *testing.T) { testInitiatorDies(t, "midbroadcast", []int{initiator}, accused) }
