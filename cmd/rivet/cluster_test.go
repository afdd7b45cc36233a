//go:build linux

package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/internal/vm"
)

// clusterPerNode is how many ranks TestHostClusterVerbs runs on each
// node. Memory would hold more: 32 a node left half of a node's 960 MiB
// free. But a node is one emulated CPU, and at 32 its soft-RoCE answered
// too late — live ranks were declared failed when their queue pairs ran
// out of retries (about 2 s) — and at 16 a barrier took 0.36 s; 8 is what
// a loaded host still runs well inside those bounds.
const clusterPerNode = 8

// TestHostClusterVerbs: a job of many ranks on each node of a two-node
// rxevm cluster, every peer reached over verbs (the node's own too),
// started torchrun-style without a launcher, runs osu_barrier and 8-byte
// osu_allreduce; every rank of both nodes exits 0.
func TestHostClusterVerbs(t *testing.T) {
	self := testutil.Executable(t)
	const k, nodes = clusterPerNode, 2
	// job PORT ARGS…: the node's k ranks of a job of `rivet ARGS…`, rank 0
	// printing; its status is 0 only if every rank's is.
	script := fmt.Sprintf(`set -u
k=%d; base=$(( (RXEVM_NODE-1)*k ))
export WORLD_SIZE=%d MASTER_ADDR=%s RIVET_JOB_SECRET=cluster-test RIVET_PROVIDER=verbs RIVET_TEST_AS_CLI=1
job() {
	port=$1; shift; pids=
	for i in $(seq 0 $((k-1))); do
		r=$((base+i))
		if [ $r = 0 ]; then RANK=$r MASTER_PORT=$port %s "$@" & else RANK=$r MASTER_PORT=$port %s "$@" >/dev/null & fi
		pids="$pids $!"
	done
	st=0
	for p in $pids; do wait $p || st=1; done
	return $st
}
job 29500 bench osu_barrier -i 20 -x 2 && job 29501 bench osu_allreduce -m 8:8 -i 20 -x 2
`, k, k*nodes, vm.NodeAddr(1), self, self)
	node := script + `echo $? >$RXEVM_SHARED/exit.$RXEVM_NODE`
	first := script + `st=$?
while [ ! -f $RXEVM_SHARED/exit.2 ]; do sleep 1; done
echo "node1 $st node2 $(cat $RXEVM_SHARED/exit.2) available $(awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo) MiB"`
	out, _ := testutil.RunCluster(t, nodes, node, nil, "sh", "-c", first)
	for _, want := range []string{"# OSU MPI Barrier Latency Test", "# OSU MPI Allreduce Latency Test", "\n8 ", "node1 0 node2 0 "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in node1's output", want)
		}
	}
}
