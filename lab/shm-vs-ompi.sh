#!/usr/bin/env bash
# Runs Rivet's osu_latency and osu_bw on shared memory side by side with
# the same loops in C over Debian's Open MPI (bench/osu/testdata/osu.c, built
# with mpicc.openmpi, run with the vader/sm BTL), two ranks on this node,
# and prints each size's figures and the ratio Rivet / Open MPI.
#
#   bash lab/shm-vs-ompi.sh            # ROUNDS=5 rounds, alternating who goes first
#
# Needs: openmpi-bin libopenmpi-dev (apt). The figure kept per size is the
# median over rounds. Latency: lower is better; bandwidth: higher is better.
set -euo pipefail
cd "$(dirname "$0")/.."
. lab/progress.sh
rounds=${ROUNDS:-5}
max=${MAX:-4194304}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

go build -o "$out/rivet" ./cmd/rivet
go build -o "$out/rivetrun" ./cmd/rivetrun
mpicc.openmpi -O2 -o "$out/ompi_osu" bench/osu/testdata/osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

# Both bind rank r to core r, as mpirun does by default for two ranks.
ompi() { mpirun.openmpi -n 2 --bind-to core "$out/ompi_osu" "$@" 2>/dev/null; }
rivet() { "$out/rivetrun" -n 2 -bind-to core "$out/rivet" bench "$@" 2>/dev/null; }

rows() { grep -E '^[0-9]' | awk '{print $1, $2}'; }

# OSU's default 10000 iterations time a 0.2 µs ping-pong for 4 ms, too
# short to be steady here; small sizes get 100000.
pass() { # ROUND: one measurement of everything, by both, Rivet first on odd rounds
	local r=$1 first=ompi second=rivet
	((r % 2)) && first=rivet second=ompi
	for who in $first $second; do
		if [ $who = ompi ]; then
			{ ompi latency -m "0:$((max < 64 ? max : 64))" -i 100000 -x 1000; ((max < 128)) || ompi latency -m "128:$max"; } | rows >"$out/ol.$r"
			ompi bw -m "$max" | rows >"$out/ob.$r"
		else
			{ rivet osu_latency -m "0:$((max < 64 ? max : 64))" -i 100000 -x 1000; ((max < 128)) || rivet osu_latency -m "128:$max"; } | rows >"$out/rl.$r"
			rivet osu_bw -m "$max" | rows >"$out/rb.$r"
		fi
	done
}
for ((r = 0; r < rounds; r++)); do
	progress "shm-vs-ompi: round $((r + 1)) of $rounds"
	pass $r
done
progress_done

# median FILES...: per size (column 1), the median of column 2
median() {
	cat "$@" | sort -k1,1n -k2,2g | awk '
		!seen || $1 != size { if (n) print size, v[int((n+1)/2)]; size = $1; n = 0; seen = 1 }
		{ v[++n] = $2 }
		END { if (n) print size, v[int((n+1)/2)] }'
}

echo "# shared memory, 2 ranks, $rounds rounds, medians; $(nproc) CPUs, $(uname -r)"
# side A B: rows "size a b a/b" for the sizes both measured
side() {
	awk 'NR == FNR { a[$1] = $2; next } ($1 in a) { printf "%-20d %12.2f %11.2f %7.3f\n", $1, a[$1], $2, ($2 > 0 ? a[$1] / $2 : 0) }' "$1" "$2"
}
median "$out"/rl.* >"$out/rl" && median "$out"/ol.* >"$out/ol"
median "$out"/rb.* >"$out/rb" && median "$out"/ob.* >"$out/ob"
echo "# osu_latency (us)           rivet    open-mpi   ratio (lower is better for rivet)"
side "$out/rl" "$out/ol"
echo "# osu_bw (MB/s)              rivet    open-mpi   ratio (higher is better for rivet)"
side "$out/rb" "$out/ob"
