//go:build linux

package ft

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() { progs.Add("cut", progCut) }

// cutEnv names the network device rank 0 takes down in progCut: the one
// under the victim's rxe device.
const cutEnv = "FT_TEST_CUT"

// progCut: the victim is cut off — its soft-RoCE device's network device
// goes down — once every pair of ranks has talked and every rank is
// ready. It lives on, unable to reach anyone; every survivor learns that
// it failed, from the sources RIVET_FT_SOURCES leaves on, and they agree
// on the failed group and still talk. The victim, declaring the others
// failed as they declare it, is ended by the launcher, which believes the
// majority.
func progCut(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me, n, v := w.Rank(), w.Size(), victim(w.Size())
	defer startDetector(ctx, ep)()
	// Every pair connected before the cut: a survivor's first handshake
	// with the victim would otherwise be the test.
	for d := 1; d < n; d++ {
		_, err := w.Sendrecv(ctx, []byte{byte(me)}, (me+d)%n, 3, make([]byte, 1), (me-d+n)%n, 3)
		must(err, "all pairs")
	}
	must(collectives.Barrier(ctx, w), "barrier")
	if me != 0 {
		must(w.Send(ctx, nil, 0, 98), "ready")
	} else {
		for r := 1; r < n; r++ {
			_, err := w.Recv(ctx, nil, r, 98)
			must(err, "ready")
		}
		if out, err := exec.Command("ip", "link", "set", os.Getenv(cutEnv), "down").CombinedOutput(); err != nil {
			failf("ip link set %s down: %v: %s", os.Getenv(cutEnv), err, out)
		}
		fmt.Printf("cut at %d\n", time.Now().UnixNano())
	}
	if me == v {
		time.Sleep(60 * time.Second)
		failf("cut off, and still running 60 s later")
	}
	awaitFailed(ctx, w, v)
	fmt.Printf("knew at %d\n", time.Now().UnixNano())
	onlyVictim(ctx, ep, v)
	return nil
}

// TestCut is the kill matrix's third way to lose a process: its link.
// Over verbs in the VM's two-device topology, the victim on rxe1 (on vb),
// the others on rxe0 (on va, vb's veth peer); with the sources that can
// tell a cut-off peer failed — the heartbeat detector, the verbs
// completion errors — alone and together. (A link event alone makes a
// peer unreachable, not failed: docs/ft.md.)
func TestCut(t *testing.T) {
	devs := testutil.RXEDevices(t)
	if len(devs) < 2 {
		testutil.Unavailable(t, "needs two soft-RoCE devices: rxevm -topology rxe2")
	}
	testutil.RequireRoot(t)
	const netdev = "vb" // rxe1's, in rxevm's rxe2 topology
	for _, src := range []string{"all", "heartbeat", "completion"} {
		for _, n := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/%d", src, n), func(t *testing.T) {
				t.Cleanup(func() { linkUp(t, netdev, devs) })
				v := victim(n)
				perRank := make([]string, n)
				for r := range perRank {
					perRank[r] = devs[0]
					if r == v {
						perRank[r] = devs[1]
					}
				}
				out, errs, st := progs.Run(t, n, "cut", true, "RIVET_PROVIDER=verbs", "RIVET_FT_SOURCES="+src,
					"RIVET_VERBS_DEVICE="+strings.Join(perRank, ","), cutEnv+"="+netdev)
				want := fmt.Sprintf("rivetrun: rank %d, declared failed by the other ranks", v)
				if st != 128+int(syscall.SIGKILL) || !strings.Contains(errs, want) {
					t.Fatalf("status %d, want 137 with %q (the launcher ended the cut-off rank)\n%s\n%s", st, want, out, errs)
				}
				for r := 0; r < n; r++ {
					if r != v && !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
						t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
					}
				}
				t.Logf("every survivor knew, after the cut: %v", sinceCut(out))
			})
		}
	}
}

// linkUp brings netdev back up and waits until every device's port is
// active again, for the tests after this one.
func linkUp(t *testing.T, netdev string, devs []string) {
	if out, err := exec.Command("ip", "link", "set", netdev, "up").CombinedOutput(); err != nil {
		t.Errorf("ip link set %s up: %v: %s", netdev, err, out)
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, d := range devs {
		for {
			b, _ := os.ReadFile("/sys/class/infiniband/" + d + "/ports/1/state")
			if strings.Contains(string(b), "ACTIVE") {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s port 1 is %q 30 s after %s came up", d, strings.TrimSpace(string(b)), netdev)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// sinceCut returns how long after the cut each survivor knew, from the
// times progCut printed (one clock: the ranks share a kernel).
func sinceCut(out string) []time.Duration {
	var cut int64
	var at []int64
	for _, l := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(l, "] "); ok {
			if v, ok := strings.CutPrefix(rest, "cut at "); ok {
				cut, _ = strconv.ParseInt(v, 10, 64)
			} else if v, ok := strings.CutPrefix(rest, "knew at "); ok {
				t, _ := strconv.ParseInt(v, 10, 64)
				at = append(at, t)
			}
		}
	}
	var ds []time.Duration
	for _, t := range at {
		ds = append(ds, time.Duration(t-cut).Round(time.Millisecond))
	}
	slices.Sort(ds)
	return ds
}
