#!/usr/bin/env bash
# Shows what shares a rank's CPU during a long osu_latency 8 B run: for
# every thread of Rivet's ranks (over verbs) and then of Open MPI + UCX's,
# the context switches it made and the CPU time it used over a window of
# the run. Run it where an rxe device exists:
#
#   go build -o bin/rxevm ./cmd/rxevm && go build -o bin/rivet ./cmd/rivet &&
#   go build -o bin/rivetrun ./cmd/rivetrun && mpicc.openmpi -O2 -o bin/ompi_osu bench/osu/testdata/osu.c &&
#   bin/rxevm -q -topology rxe -timeout 10m bash lab/rank-threads.sh
#
# A polling thread shows involuntary switches (it was preempted); a helper
# thread that wakes on a timer shows voluntary ones. Threads that did
# nothing in the window are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BIN:-bin}
dev=${DEV:-rxe0}
window=${WINDOW:-5}
hostname rivet-vm # mpirun refuses to start while the hostname is "(none)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# snap COMM...: a line per thread of the processes named COMM: pid/tid,
# name, voluntary and involuntary switches, CPU time in clock ticks
snap() {
	local c p t
	for c in "$@"; do
		for p in $(pgrep -x "$c" || true); do
			for t in /proc/"$p"/task/*; do
				awk -v id="$p/${t##*/}" -v c="$c" 'FNR == 1 && FILENAME ~ /stat$/ {tk = $14 + $15}
					/^voluntary_ctxt/ {v = $2} /^nonvoluntary_ctxt/ {n = $2} END {print id, c, v, n, tk}' \
					"$t/stat" "$t/status" 2>/dev/null || true
			done
		done
	done | sort
}
# measure LABEL COMM...: the difference of two snapshots WINDOW seconds
# apart, taken once the run is under way
measure() {
	local label=$1 t0 t1
	shift
	sleep 10 # past start-up: mpirun takes seconds to start its ranks under TCG
	t0=$(date +%s.%N)
	snap "$@" >/tmp/rank-threads.a
	sleep "$window"
	snap "$@" >/tmp/rank-threads.b
	t1=$(date +%s.%N)
	echo "== $label: over $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s (CPU in ticks of 1/$(getconf CLK_TCK) s)"
	join /tmp/rank-threads.a /tmp/rank-threads.b |
		awk '$7 - $3 + $8 - $4 + $9 - $5 > 0 {printf "  %-10s %-16s voluntary %6d  involuntary %6d  CPU %5d\n", $1, $2, $7 - $3, $8 - $4, $9 - $5}'
}

RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=$dev "$B/rivetrun" -n 2 "$B/rivet" bench osu_latency -m 8:8 -i 1000000 -x 100 >/dev/null 2>&1 &
measure "Rivet (rivetrun, 2 ranks over verbs)" rivet rivetrun
pkill -x rivet || true
wait || true
mpirun.openmpi -n 2 --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca btl ^openib,uct \
	-x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=$dev:1 -x UCX_IB_GID_INDEX=0 \
	"$B/ompi_osu" latency -m 8:8 -i 1000000 -x 100 >/dev/null 2>&1 &
measure "Open MPI + UCX (mpirun, 2 ranks)" ompi_osu mpirun.openmpi
pkill -x ompi_osu || true
wait || true
