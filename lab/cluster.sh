#!/usr/bin/env bash
# Across the nodes of an rxevm cluster (each node its own kernel, one
# emulated CPU), the figures of docs/performance.md's cluster table:
#
#   bash lab/cluster.sh detect   # a node's fault → the last survivor
#                                # knowing, per fault, failure sources and
#                                # detector timeout (ROUNDS each, 5)
#   bash lab/cluster.sh osu      # osu_latency and osu_bw, node1 ↔ node2,
#                                # at 0% and 1% RoCE loss (ROUNDS each, 3)
#   bash lab/cluster.sh recover  # rivet bench ft_recover on 3 nodes
#
# detect runs ft's TestHostMatrix cases (3 nodes, the third faulted)
# with RIVET_FT_SOURCES and the detector's timeout set
# (RIVET_FT_CLUSTER_TIMEOUT; "-": no detector), and prints the median and
# range of "the last survivor knew after". A round that fails (a live
# node convicted at the short timeout on a busy host) gives no figure:
# compare the rounds column with ROUNDS.
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
	echo "| fault | sources | detector timeout | → last survivor knew, ms: median (min–max) | rounds |"
	echo "|---|---|---|---|---|"
	for row in "kill heartbeat 200ms" "kill all 200ms" "kill heartbeat 2s" "kill completion -" "kill all 2s" \
		"link all 200ms" "stop all 200ms"; do
		set -- $row
		: >"$out/t"
		for i in $(seq "${rounds:-5}"); do
			RIVET_FT_SOURCES=$2 RIVET_FT_CLUSTER_TIMEOUT=${3/-/2s} go test -count=1 -v -run "TestHostMatrix/$1\$" ./ft >"$out/log" 2>&1 || true
			sed -n "s/.*$1: rank 0 knew after .*, the last survivor after \([0-9.]*\)\(m*s\).*/\1 \2/p" "$out/log" |
				awk '{print ($2 == "ms") ? $1 : $1 * 1000}' >"$out/one"
			if [ -s "$out/one" ]; then
				cat "$out/one" >>"$out/t"
			else
				cp "$out/log" "/tmp/rivet-cluster-$1-$2-$3-$i.log"
				echo "lab/cluster.sh: $row, round $i gave no figure: /tmp/rivet-cluster-$1-$2-$3-$i.log" >&2
			fi
		done
		echo "| $1 | $2 | $3 | $(median <"$out/t") ($(sort -g "$out/t" | head -1)–$(sort -g "$out/t" | tail -1)) | $(wc -l <"$out/t") |"
	done
	;;
osu)
	# The emulated link is slow (each node one TCG CPU, frames through
	# rxevm's switch): small sizes, few iterations, and the raw verbs
	# figures of the same link (rivet perf, at parity with perftest) as
	# the reference, each in its own boot of the cluster.
	perf="$out/rivet perf"
	for loss in 0 1; do
		for r in $(seq "${rounds:-3}"); do
			echo "## loss $loss%, round $r: raw verbs (rivet perf send_lat 8 B, write_bw 8 KiB)"
			"$out/rxevm" -q -topology cluster:2 -timeout 10m \
				-node-cmd "$perf send_lat -d rxe0 -s 8 -n 300 >/dev/null; $perf write_bw -d rxe0 -s 8192 -n 100 >/dev/null" \
				-- sh -c "$out/rivet fault loss -dev eth0 -percent $loss && sleep 1 &&
					$perf send_lat -d rxe0 -s 8 -n 300 192.0.2.2 | grep -A1 '#bytes' && sleep 1 &&
					$perf write_bw -d rxe0 -s 8192 -n 100 192.0.2.2 | grep -A1 '#bytes'"
			echo "## loss $loss%, round $r: osu_latency, osu_bw"
			job 2 "$out/rivet bench osu_latency -m 1024 -i 300 -x 30 && $out/rivet bench osu_bw -m 8192 -i 5 -x 1" \
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
