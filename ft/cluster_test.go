//go:build linux

package ft

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/internal/vm"
	"github.com/rivet-hpc/rivet/op"
)

// The tests here run a job across the nodes of an rxevm cluster, one rank
// per node, each its own kernel: a node that dies takes its rank with it
// and nobody on another node has a pidfd, a goodbye or a launcher's word
// for it — only silence, the NIC's retries and the heartbeat.

func init() { progs.Add("nodedeath", progNodeDeath) }

// clusterTimeout is the detector's timeout across the cluster's nodes:
// each is a TCG VM with one vCPU on a shared 2-core machine, whose vCPU —
// and with it the node's soft-RoCE, which answers the heartbeat reads —
// the host may hold for longer than the default 200 ms (see
// matrixOptions), and a live node that answers no read for half the
// timeout is convicted.
const clusterTimeout = 2 * time.Second

// progNodeDeath: world rank 0 (node1) has the runner kill the last rank's
// node (its qemu, SIGKILL) once every rank is ready; each survivor times
// how long until it knows, the others tell rank 0 at once, and the
// survivors agree on the failed group and shrink.
func progNodeDeath(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	n, me, v := w.Size(), w.Rank(), w.Size()-1
	d, err := Start(ctx, ep, Options{Timeout: clusterTimeout})
	must(err, "start the detector")
	defer d.Stop()
	must(collectives.Barrier(ctx, w), "barrier")
	switch me {
	case v:
		w.Recv(ctx, nil, 0, 96) // never sent: the node dies under it
		failf("the victim lived on")
	case 0:
		for r := 1; r < v; r++ {
			_, err := w.Recv(ctx, nil, r, 98)
			must(err, "ready")
		}
		must(vm.Control(ctx, fmt.Sprintf("kill %d", v+1)), "kill the victim's node")
		t0 := time.Now()
		self := awaitFailed(ctx, w, v)
		for r := 1; r < v; r++ {
			_, err := w.Recv(ctx, nil, r, 97)
			must(err, "a survivor's word")
		}
		fmt.Printf("node death: rank 0 knew after %v, the last survivor after %v\n",
			self.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	default:
		must(w.Send(ctx, nil, 0, 98), "ready")
		awaitFailed(ctx, w, v)
		must(w.Send(ctx, nil, 0, 97), "tell rank 0")
	}
	onlyVictim(ctx, ep, v)
	s, err := Shrink(ctx, w)
	must(err, "shrink")
	defer s.Free()
	sum := make([]int64, 1)
	must(collectives.Allreduce(ctx, s, []int64{1}, sum, op.Sum[int64]()), "allreduce on the survivors")
	if s.Size() != n-1 || sum[0] != int64(n-1) {
		failf("shrunk to %d, sum %d; want %d", s.Size(), sum[0], n-1)
	}
	return nil
}

// runCluster runs program prog on a cluster of nodes VMs, one rank per
// node, meeting torchrun-style at node1, and returns node1's stdout and
// the runner's stderr (the other nodes' output, tagged).
func runCluster(t *testing.T, nodes int, prog string, env ...string) (string, string) {
	t.Helper()
	testutil.RequireVM(t)
	rxevm := filepath.Join(t.TempDir(), "rxevm")
	build := exec.Command("go", "build", "-o", rxevm, "../cmd/rxevm")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rxevm: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, rxevm, "-topology", fmt.Sprintf("cluster:%d", nodes), "-timeout", "7m",
		"-node-cmd", `RANK=$((RXEVM_NODE-1)) exec `+self,
		"--", "sh", "-c", "RANK=0 exec "+self)
	cmd.Env = append(os.Environ(), append([]string{progs.Env + "=" + prog, fmt.Sprintf("WORLD_SIZE=%d", nodes),
		"MASTER_ADDR=" + vm.NodeAddr(1), "MASTER_PORT=29500", "RIVET_JOB_SECRET=" + prog + "-test"}, env...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	if err != nil {
		t.Fatalf("rxevm: %v", err)
	}
	return out.String(), errb.String()
}

// TestHostNodeDeath boots a cluster of three VMs and runs one rank on each;
// the third node dies. Every survivor learns it within the detector's
// timeout and a margin for the emulated machine, and they recover.
func TestHostNodeDeath(t *testing.T) {
	out, errs := runCluster(t, 3, "nodedeath")
	m := regexp.MustCompile(`node death: rank 0 knew after (\S+), the last survivor after (\S+)\n`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "rank 0 ok\n") || !strings.Contains(errs, "[node2] rank 1 ok\n") {
		t.Fatal("the survivors did not recover")
	}
	// The detector convicts a silent peer across nodes once its reads have
	// gone unanswered for half the timeout, at the timeout, or a timeout
	// later when its own ticks came late (the jitter guard); the margin is
	// for the emulated machine and the word to rank 0.
	last, err := time.ParseDuration(m[2])
	if err != nil || last > 2*clusterTimeout+2*time.Second {
		t.Errorf("the last survivor knew after %s, want within 2 × %v + 2 s", m[2], clusterTimeout)
	}
}
