//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	progs.BeforeInit("midbroadcast", func() {
		if os.Getenv("PMI_RANK") != fmt.Sprint(initiator) {
			return
		}
		testHookNoticeSent = func(t int) {
			if t == accused {
				return
			}
			// The notice is on its way to t: once t has it, die without
			// telling anyone else.
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if names, _ := filepath.Glob(filepath.Join(os.Getenv(knewDirEnv), "*")); len(names) > 0 {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
					select {}
				}
			}
			fmt.Fprintf(os.Stderr, "rank %d: neighbour %d never learned of the verdict\n", initiator, t)
			os.Exit(3)
		}
	})
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
	for d := 1; d < n; d++ {
		_, err := w.Sendrecv(ctx, []byte{byte(me)}, (me+d)%n, 3, make([]byte, 1), (me-d+n)%n, 3)
		must(err, "all pairs")
	}
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
	must(os.WriteFile(filepath.Join(os.Getenv(knewDirEnv), fmt.Sprint(me)), nil, 0o644), "leave a mark")
	if f := ep.Failed(); len(f) != 1 || f[0] != accused {
		failf("known failed %v, want [%d] (nothing tells of the initiator's death)", f, accused)
	}
	return nil
}

// TestInitiatorDies: a broadcast whose initiator dies mid-way still
// reaches every survivor, over shared memory and over verbs.
func TestInitiatorDies(t *testing.T) {
	for _, way := range []string{"shm", "verbs"} {
		t.Run(way, func(t *testing.T) {
			env := []string{"RIVET_PROVIDER=shm"}
			if way == "verbs" {
				env = []string{"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + testutil.RXEDevices(t)[0]}
			}
			const n = 8
			env = append(env, "RIVET_FT_SOURCES=none", knewDirEnv+"="+t.TempDir())
			out, errs, st := runJob(t, n, "midbroadcast", true, env...)
			if !strings.Contains(errs, fmt.Sprintf("rank %d was killed by signal 9", initiator)) {
				t.Fatalf("the initiator did not die mid-broadcast (status %d)\n%s\n%s", st, out, errs)
			}
			for r := 0; r < n; r++ {
				if r != initiator && r != accused && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
				}
			}
		})
	}
}
