#!/usr/bin/env bash
# internal/ftsim's model held against our runs: the times of the model's
# references (a dissemination barrier, a recursive-doubling allreduce of
# 4 B — forced, so that shared memory runs them over messages too), of
# an agreement over messages (iagree) and of a revoke, measured by
# `rivet bench ft_recover`, with osu_latency 8 B beside; then
# internal/ftsim's TestCalibration fits the model's one constant (the
# time of a hop) to the references and predicts the agreement and the
# revoke with it.
#
#   bash lab/ftsim-calibrate.sh                  # shm, rxe and cluster
#   bash lab/ftsim-calibrate.sh shm              # one platform
#   OUT=docs/results bash lab/ftsim-calibrate.sh # and keep the CSV
#   bash lab/ftsim-calibrate.sh table FILE       # the table of a CSV
#
# shm: this host, NPS ranks (default "2 4 8 16"); rxe: one VM, verbs over
# soft-RoCE (NPS default "2 4 8"); cluster: 3 rxevm nodes, one rank each.
# Each figure is the median over ROUNDS jobs (default 5; the cluster's
# is one job) of ft_recover's largest per-rank mean (µs; ITERS
# iterations, default 1000, 200 in VMs). About 4 minutes on 2 CPUs at
# ROUNDS=11, most of it the VMs' boots.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
coll="barrier=dissemination,allreduce=recursive_doubling"
source lab/stats.sh

table() {
	FTSIM_CALIBRATE=$(realpath "$1") go test -count=1 -run '^TestCalibration$' -v ./internal/ftsim |
		grep -E '^\s+(\||calibrate_test.go:[0-9]+:)' | sed -E 's/^\s+//; s/calibrate_test.go:[0-9]+: //'
}

# measure PLATFORM NPS ENV…: the CSV rows of PLATFORM, ranks on one node.
measure() {
	local platform=$1 nps=$2 iters=${ITERS:-1000} np r row v
	shift 2
	[ "$platform" = shm ] || iters=${ITERS:-200}
	local w
	w=$(mktemp -d /tmp/rivet-calibrate-w.XXXXXX)
	for np in $nps; do
		for ((r = 0; r < rounds; r++)); do
			progress "calibrate $platform: $np ranks, round $((r + 1)) of $rounds"
			res=$("$@" RIVET_COLL_ALGORITHMS=$coll "$BIN/rivet" bench -np "$np" ft_recover -i "$iters" -x $((iters / 10)) 2>/dev/null || true)
			for row in barrier "allreduce (4 B)" iagree revoke; do
				v=$(awk -v row="$row" '{name = substr($0, 1, 20); sub(/ +$/, "", name)} name == row {print $(NF - 1)}' <<<"$res")
				echo "${v:--}" >>"$w/$np.${row%% *}"
			done
			if [ "$np" = 2 ]; then
				v=$("$@" "$BIN/rivet" bench -np 2 osu_latency -m 8 -i $((iters * 5)) 2>/dev/null | awk '$1 == 8 {print $2}' || true)
				echo "${v:--}" >>"$w/$np.latency"
			fi
		done
		for row in latency barrier allreduce iagree revoke; do
			[ -f "$w/$np.$row" ] || continue
			v=$(median <"$w/$np.$row")
			[ "$v" = nan ] || echo "$platform,$np,$np,$row,$v"
		done
	done
	progress_done
	rm -rf "$w"
}

case ${1:-all} in
table)
	table "$2"
	exit
	;;
--in-vm)
	measure rxe "${NPS:-2 4 8}" env RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=rxe0
	exit
	;;
all) platforms="shm rxe cluster" ;;
shm | rxe | cluster) platforms=$1 ;;
*)
	echo "lab/ftsim-calibrate.sh: shm, rxe, cluster, all or table FILE" >&2
	exit 2
	;;
esac

BIN=$(mktemp -d /tmp/rivet-calibrate.XXXXXX)
trap 'rm -rf "$BIN"' EXIT
export BIN
CGO_ENABLED=0 go build -o "$BIN/rivet" ./cmd/rivet
CGO_ENABLED=0 go build -o "$BIN/rxevm" ./cmd/rxevm
csv=$BIN/calibration.csv
echo "platform,ranks,ppn,op,us" >"$csv"
echo "# $(nproc) CPUs, kernel $(uname -r), $(git rev-parse --short HEAD)"
for p in $platforms; do
	case $p in
	shm) measure shm "${NPS:-2 4 8 16}" env RIVET_PROVIDER=shm >>"$csv" ;;
	rxe)
		"$BIN/rxevm" -q -topology rxe -timeout 60m env BIN="$BIN" ROUNDS="$rounds" ITERS="${ITERS:-}" NPS="${NPS:-2 4 8}" \
			bash "$0" --in-vm >>"$csv"
		;;
	cluster)
		# A torchrun-style job of 3 ranks, one a node (as lab/cluster.sh
		# runs them); across nodes the collectives are messages anyway.
		for what in "3 ft_recover -i ${ITERS:-200} -x 20" "2 osu_latency -m 8 -i 300 -x 30"; do
			set -- $what
			n=$1
			shift
			env="WORLD_SIZE=$n MASTER_ADDR=192.0.2.1 MASTER_PORT=29500 RIVET_JOB_SECRET=lab"
			progress "calibrate cluster: $1 on $n nodes"
			"$BIN/rxevm" -q -topology "cluster:$n" -timeout 20m \
				-node-cmd "RANK=\$((RXEVM_NODE-1)) $env $BIN/rivet bench $* >/dev/null" \
				-- sh -c "RANK=0 $env $BIN/rivet bench $*" >"$BIN/cluster.$1"
		done
		progress_done
		awk '{name = substr($0, 1, 20); sub(/ +$/, "", name)}
			name == "barrier" || name == "allreduce (4 B)" || name == "iagree" || name == "revoke" {
				sub(/ .*/, "", name); print "cluster,3,1," name "," $(NF - 1)}' "$BIN/cluster.ft_recover" >>"$csv"
		awk '$1 == 8 {print "cluster,3,1,latency," $2}' "$BIN/cluster.osu_latency" >>"$csv"
		;;
	esac
done
if [ -n "${OUT:-}" ]; then
	mkdir -p "$OUT"
	keep=$OUT/ftsim-calibration.csv
	# The platforms not measured now keep their rows.
	{
		cat "$csv"
		if [ -f "$keep" ]; then awk -F, -v now=" $platforms " 'NR > 1 && index(now, " " $1 " ") == 0' "$keep"; fi
	} | awk -F, 'NR == 1 {print; next} {o = ($1 == "shm") ? 1 : ($1 == "rxe") ? 2 : 3; print o "\t" $0}' |
		{ IFS= read -r head; echo "$head"; sort -s -t$'\t' -k1,1n | cut -f2-; } >"$keep.new"
	mv "$keep.new" "$keep"
	csv=$keep
fi
table "$csv"
