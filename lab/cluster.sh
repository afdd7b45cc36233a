#!/usr/bin/env bash
# Across the nodes of an rxevm cluster (each node its own kernel, one
# emulated CPU), the figures of docs/performance.md's cluster table:
#
#   bash lab/cluster.sh detect   # node death → the last survivor knowing,
#                                # per failure-source set (ROUNDS each, 5)
#   bash lab/cluster.sh osu      # osu_latency and osu_bw, node1 ↔ node2,
#                                # at 0% and 1% RoCE loss (ROUNDS each, 3)
#   bash lab/cluster.sh recover  # rivet bench ft_recover on 3 nodes
#
# detect runs ft's TestHostMatrix kill case (3 nodes, the detector at a
# 2 s timeout) with RIVET_FT_SOURCES set, and prints the median and
# range of "the last survivor knew after".
set -euo pipefail
cd "$(dirname "$0")/.."
. lab/stats.sh
what=${1:-detect}
rounds=${ROUNDS:-}
out=$(mktemp -d /tmp/rivet-cluster.XXXXXX)
trap 'rm -rf "$out"' EXIT
CGO_ENABLED=0 go build -o "$out/rivet" ./cmd/rivet
CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
echo "# $(nproc) CPUs, host kernel $(uname -r); rxevm cluster nodes: 1 vCPU each (TCG)"

# job N CMD [FIRST]: a torchrun-style job of N ranks, one per node, each
# running the shell command CMD — rank 0 on node1, after FIRST there; its
# output is what is printed.
job() {
	local n=$1 cmd=$2 first=${3:-true}
	local env="WORLD_SIZE=$n MASTER_ADDR=192.0.2.1 MASTER_PORT=29500 RIVET_JOB_SECRET=lab"
	"$out/rxevm" -q -topology "cluster:$n" -timeout 15m \
		-node-cmd "RANK=\$((RXEVM_NODE-1)) $env sh -c '$cmd' >/dev/null" \
		-- sh -c "$first && RANK=0 $env sh -c '$cmd'"
}

case $what in
detect)
	echo "| sources | node death → last survivor knew, s: median (min–max) | rounds |"
	echo "|---|---|---|"
	for src in heartbeat completion all; do
		: >"$out/t"
		for _ in $(seq "${rounds:-5}"); do
			RIVET_FT_SOURCES=$src go test -count=1 -v -run 'TestHostMatrix/kill$' ./ft 2>&1 |
				sed -n 's/.*kill: rank 0 knew after .*, the last survivor after \([0-9.]*\)\(m*s\).*/\1 \2/p' |
				awk '{print ($2 == "ms") ? $1 / 1000 : $1}' >>"$out/t" || true
		done
		echo "| $src | $(median <"$out/t") ($(sort -g "$out/t" | head -1)–$(sort -g "$out/t" | tail -1)) | $(wc -l <"$out/t") |"
	done
	;;
osu)
	for loss in 0 1; do
		for r in $(seq "${rounds:-3}"); do
			echo "## loss $loss%, round $r"
			job 2 "$out/rivet bench osu_latency -m 8192 && $out/rivet bench osu_bw -m 1048576" \
				"$out/rivet fault loss -dev eth0 -percent $loss"
		done
	done
	;;
recover)
	job 3 "$out/rivet bench ft_recover -i 200 -x 20"
	;;
*)
	echo "lab/cluster.sh: detect, osu or recover" >&2
	exit 2
	;;
esac
