#!/usr/bin/env bash
# A node of many processes: for each count N, Rivet (rivetrun, shared
# memory) beside Open MPI 4.1 (mpirun, vader) running the same C loops
# (bench/osu/testdata/osu.c) on this machine, oversubscribed as need be.
# Per side and N it prints the peak /dev/shm use and the peak of the
# ranks' summed PSS while the job runs (sampled), OSU's osu_init average
# (fabric.Init / MPI_Init, ms), and osu_barrier and 8-byte osu_allreduce
# latencies (µs). The job of each figure is its own run, so the memory
# peak is that of the barrier job.
#
#   bash lab/scale.sh [N …]          # default 8 16 32 64 128 256
#
# SIDES (default "rivet ompi") says which to run; ITERS (default 200)
# timed barriers and allreduces after WARMUP (5); SAMPLE seconds between
# memory samples (0.3), taken during a barrier job of HOLD seconds (4).
# Output is one line per N and side, a header first. With RESULTS=DIR
# it also appends each side's summed PSS to DIR/node-pss.SIDE.txt, a
# table `rivet plot` draws (lab/plots.sh: docs/results). Needs
# openmpi-bin and libopenmpi-dev.
set -euo pipefail
cd "$(dirname "$0")/.."
. lab/progress.sh
counts=("$@")
((${#counts[@]})) || counts=(8 16 32 64 128 256)
iters=${ITERS:-200} warm=${WARMUP:-5} sample=${SAMPLE:-0.3} hold=${HOLD:-4}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

CGO_ENABLED=0 go build -o "$out/rivet" ./cmd/rivet
CGO_ENABLED=0 go build -o "$out/rivetrun" ./cmd/rivetrun
mpicc.openmpi -O2 -o "$out/osu" bench/osu/testdata/osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

shm_used() { df -B1 --output=used /dev/shm | tail -1; }
# pss PATTERN: the summed Pss (KiB) of the processes whose command line
# matches PATTERN (the ranks, not their launcher).
pss() {
	local sum=0 p v
	for p in $(pgrep -f -- "$1" || true); do
		v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || true)
		sum=$((sum + ${v:-0}))
	done
	echo "$sum"
}
# watch PATTERN CMD…: runs CMD, sampling /dev/shm and the ranks' summed PSS
# until it ends; leaves CMD's output in $out/job and the peaks (MiB) in
# $out/peaks.
watch() {
	local prog=$1 base peak_shm=0 peak_pss=0 s p
	shift
	base=$(shm_used)
	"$@" >"$out/job" 2>"$out/job.err" &
	local job=$!
	while kill -0 "$job" 2>/dev/null; do
		s=$(($(shm_used) - base))
		p=$(pss "$prog")
		((s > peak_shm)) && peak_shm=$s
		((p > peak_pss)) && peak_pss=$p
		sleep "$sample"
	done
	wait "$job" || { cat "$out/job.err" >&2; return 1; }
	echo "$((peak_shm >> 20)) $((peak_pss >> 10))" >"$out/peaks"
}
lat() { awk '!/^#/ && NF {v = $NF} END {print v}' "$out/job"; }
initavg() { sed -n 's/.*avg: \([0-9]*\) ms.*/\1/p' "$out/job"; }

printf "%-6s %-8s %12s %12s %10s %14s %14s\n" "procs" "side" "shm_MiB" "pss_MiB" "init_ms" "barrier_us" "allreduce_us"
for n in "${counts[@]}"; do
	progress "scale: $n processes"
	for side in ${SIDES:-rivet ompi}; do
		if [ $side = rivet ]; then
			run() { "$out/rivetrun" -n "$n" -bind-to none "$out/rivet" bench "$@"; }
			tests=(osu_barrier osu_init osu_allreduce) ranks="^$out/rivet bench"
		else
			run() { mpirun.openmpi -n "$n" --oversubscribe --bind-to none "$out/osu" "$@"; }
			tests=(barrier init allreduce) ranks="^$out/osu barrier"
		fi
		run "${tests[0]}" -i "$iters" -x "$warm" >"$out/job" 2>/dev/null
		barrier=$(lat)
		# The memory is that of a barrier job long enough (HOLD seconds)
		# for the samples to see every rank alive at once.
		watch "$ranks" run "${tests[0]}" -i "$(awk -v l="$barrier" -v i="$iters" -v h="$hold" 'BEGIN {n = int(h * 1e6 / l); print (n > i ? n : i)}')" -x "$warm"
		run "${tests[1]}" >"$out/job" 2>/dev/null
		init=$(initavg)
		run "${tests[2]}" -m 8:8 -i "$iters" -x "$warm" >"$out/job" 2>/dev/null
		allreduce=$(lat)
		read -r shm p <"$out/peaks"
		printf "%-6d %-8s %12d %12d %10s %14s %14s\n" "$n" "$side" "$shm" "$p" "$init" "$barrier" "$allreduce"
		if [ -n "${RESULTS:-}" ]; then
			[ -s "$RESULTS/node-pss.$side.txt" ] ||
				printf '# A node of N processes: the ranks'"'"' summed PSS\n# Processes     PSS (MiB)\n' >"$RESULTS/node-pss.$side.txt"
			printf "%-15d %d\n" "$n" "$p" >>"$RESULTS/node-pss.$side.txt"
		fi
	done
done
progress_done
