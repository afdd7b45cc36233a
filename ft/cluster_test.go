//go:build linux

package ft

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/internal/vm"
)

// The tests here run a job across the nodes of an rxevm cluster, one rank
// per node, each its own kernel: a node that dies takes its rank with it
// and nobody on another node has a pidfd, a goodbye or a launcher's word
// for it — only silence, the NIC's retries and the heartbeat.

// clusterTimeout is the detector's timeout across the cluster's nodes
// (RIVET_FT_CLUSTER_TIMEOUT, for lab/cluster.sh, overrides it):
// each is a TCG VM with one vCPU on a shared 2-core machine, whose vCPU —
// and with it the node's soft-RoCE, which answers the heartbeat reads —
// the host may hold for longer than the default 200 ms (see
// matrixOptions), and a live node that answers no read for half the
// timeout is convicted.
var clusterTimeout = envDuration("RIVET_FT_CLUSTER_TIMEOUT", 2*time.Second)

// envDuration is the duration in environment variable name, or def.
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// runCluster runs program prog on a cluster of nodes VMs, one rank per
// node, meeting torchrun-style at node1, and returns node1's stdout and
// the runner's stderr (the other nodes' output, tagged). Each other node
// records its command's exit status in RXEVM_SHARED/exit.<node>.
func runCluster(t *testing.T, nodes int, prog string, env ...string) (string, string) {
	t.Helper()
	self := testutil.Executable(t)
	return testutil.RunCluster(t, nodes, `RANK=$((RXEVM_NODE-1)) `+self+`; echo $? >$RXEVM_SHARED/exit.$RXEVM_NODE`,
		append([]string{progs.Env + "=" + prog, fmt.Sprintf("WORLD_SIZE=%d", nodes), "MASTER_ADDR=" + vm.NodeAddr(1),
			"MASTER_PORT=29500", "RIVET_JOB_SECRET=" + prog + "-test"}, env...),
		"sh", "-c", "RANK=0 exec "+self)
}
