#!/usr/bin/env bash
# What 100 timer wakes a second per CPU cost a ping-pong that has none of
# its own: Open MPI + UCX's osu_latency 8 B over rxe, alone and beside one
# lab/qemu/sleeper per vCPU (the wake rate of the Go runtime's monitor
# thread in each rank), with Rivet's osu_latency in the same rounds for
# comparison. All three time every iteration (--percentiles). Per-round
# ratios of the mean, the median iteration and the 90th and 99th
# percentiles, median over the rounds, in one VM run.
#
#   ROUNDS=10 bash lab/timer-wakes.sh      # about 5 minutes
#
# On the host it builds everything and re-runs itself inside rxevm.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-10}

if [ "${1:-}" != "--in-vm" ]; then
	out=$(mktemp -d /tmp/timer-wakes.XXXXXX)
	trap 'rm -rf "$out"' EXIT
	CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
	go build -o "$out/rivet" ./cmd/rivet
	go build -o "$out/rivetrun" ./cmd/rivetrun
	mpicc.openmpi -O2 -o "$out/ompi_osu" bench/osu/testdata/osu.c
	gcc -O2 -Wall -static -o "$out/sleeper" lab/qemu/sleeper.c
	exec "$out/rxevm" -q -topology rxe -timeout 40m env BIN="$out" ROUNDS="$rounds" bash "$0" --in-vm
fi

. lab/stats.sh
hostname rivet-vm # mpirun refuses to start while the hostname is "(none)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dev=rxe0
# Each prints "mean p50 p90 p99" (µs, one-way) of one run.
ompi() {
	timeout 300 mpirun.openmpi -n 2 --oversubscribe --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
		--mca btl ^openib,uct -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=$dev:1 -x UCX_IB_GID_INDEX=0 \
		"$BIN/ompi_osu" latency -m 8:8 -i 5000 -x 500 --percentiles 2>/dev/null | grep -E '^[0-9]' | tail -1 | awk '{print $2, $3, $4, $5}'
}
rivet() {
	RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=$dev timeout 300 "$BIN/rivetrun" -n 2 "$BIN/rivet" bench osu_latency \
		-m 8:8 -i 5000 -x 500 --percentiles 2>/dev/null | grep -E '^[0-9]' | tail -1 | awk '{print $2, $3, $4, $5}'
}
sleepers() {
	taskset -c 0 "$BIN/sleeper" &
	local s0=$!
	taskset -c 1 "$BIN/sleeper" &
	local s1=$!
	ompi
	kill $s0 $s1
	wait $s0 $s1 2>/dev/null || true
}
w=$(mktemp -d)
for r in $(seq 1 "$rounds"); do
	order="ompi sleepers rivet"
	[ $((r % 2)) = 1 ] || order="rivet sleepers ompi"
	for t in $order; do
		v=$($t)
		echo "round $r $t: ${v:-failed}" >&2
		# one file per program and measure, a line per round ("-": none)
		set -- ${v:-- - - -}
		for i in 1 2 3 4; do
			echo "${!i}" >>"$w/$t.$i"
		done
	done
done
# ratio A B I: per-round A/B of measure I, median over the rounds
ratio() { ratios "$w/$1.$3" "$w/$2.$3" | median; }
col() { median <"$w/$1.$2"; }
echo "# osu_latency 8 B over rxe0, $rounds rounds; per-round ratios, median over the rounds; medians of the runs' values (µs) in parentheses"
echo "| measure | Open MPI with sleepers / alone | Rivet / Open MPI | Rivet / Open MPI with sleepers |"
echo "|---|---|---|---|"
i=1
for m in mean "median iteration" "90th percentile" "99th percentile"; do
	printf '| %s | %.3f (%s / %s) | %.3f (%s / %s) | %.3f |\n' "$m" \
		"$(ratio sleepers ompi $i)" "$(col sleepers $i)" "$(col ompi $i)" \
		"$(ratio rivet ompi $i)" "$(col rivet $i)" "$(col ompi $i)" \
		"$(ratio rivet sleepers $i)"
	i=$((i + 1))
done
