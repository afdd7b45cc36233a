#!/usr/bin/env bash
# Runs Rivet's osu_allreduce and osu_barrier on shared memory side by side
# with the same loops in C over Debian's Open MPI (bench/osu/testdata/osu.c,
# vader/sm BTL), on 2 and 4 ranks of this node, and prints each size's
# figures and the ratio Rivet / Open MPI (lower is better for Rivet).
#
#   ROUNDS=3 bash lab/coll-vs-ompi.sh
#
# Needs: openmpi-bin libopenmpi-dev (apt). Ranks are bound to cores when
# there are no more ranks than CPUs (both launchers' default); with more,
# both run oversubscribed (Open MPI then yields when idle, and so does
# Rivet). The figure kept per size is the median over rounds; the last
# column is the median of the per-round ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
. lab/progress.sh
rounds=${ROUNDS:-3}
max=${MAX:-1048576}
small=${SMALL_ITERS:-20000}
smax=$((max < 8192 ? max : 8192))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

go build -o "$out/rivet" ./cmd/rivet
go build -o "$out/rivetrun" ./cmd/rivetrun
mpicc.openmpi -O2 -o "$out/ompi_osu" bench/osu/testdata/osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

rows() { grep -E '^ *[0-9]' | awk 'NF == 1 {print 0, $1; next} {print $1, $2}'; }
median() {
	cat "$@" | sort -k1,1n -k2,2g | awk '
		!seen || $1 != size { if (n) print size, v[int((n+1)/2)]; size = $1; n = 0; seen = 1 }
		{ v[++n] = $2 }
		END { if (n) print size, v[int((n+1)/2)] }'
}
# perround KIND NP: per size, the median over rounds of Rivet's figure over
# Open MPI's in the same round (the machine drifts between fast and slow
# spells; a ratio within a round cancels much of it).
perround() {
	for ((r = 0; r < rounds; r++)); do
		awk 'NR == FNR { a[$1] = $2; next } ($1 in a) && $2 > 0 { print $1, a[$1] / $2 }' "$out/r$1.$2.$r" "$out/o$1.$2.$r"
	done | sort -k1,1n -k2,2g | awk '
		!seen || $1 != size { if (n) print size, v[int((n+1)/2)]; size = $1; n = 0; seen = 1 }
		{ v[++n] = $2 }
		END { if (n) print size, v[int((n+1)/2)] }'
}
side() {
	awk 'FILENAME == ARGV[1] { a[$1] = $2; next } FILENAME == ARGV[2] { p[$1] = $2; next }
		($1 in a) { printf "%-20d %12.2f %11.2f %7.3f %9.3f\n", $1, a[$1], $2, ($2 > 0 ? a[$1] / $2 : 0), p[$1] }' "$1" "$3" "$2"
}

for np in 2 4; do
	bind=core
	((np > $(nproc))) && bind=none
	ompi() { mpirun.openmpi -n "$np" --oversubscribe --bind-to "$bind" "$out/ompi_osu" "$@" 2>/dev/null; }
	rivet() { "$out/rivetrun" -n "$np" -bind-to "$bind" "$out/rivet" bench "$@" 2>/dev/null; }
	# OSU's 1000 iterations time a sub-microsecond barrier for under a
	# millisecond, too short to be steady here: up to 8 KiB both get
	# $small iterations after $((small / 10)) of warm-up.
	for ((r = 0; r < rounds; r++)); do
		progress "coll-vs-ompi: round $((r + 1)) of $rounds"
		for who in ompi rivet; do
			((r % 2)) && who=$([ $who = ompi ] && echo rivet || echo ompi)
			if [ $who = ompi ]; then
				{ ompi allreduce -m "1:$smax" -i "$small" -x $((small / 10)); ((max < 16384)) || ompi allreduce -m "16384:$max"; } | rows >"$out/oa.$np.$r"
				ompi barrier -i "$small" -x $((small / 10)) | rows >"$out/ob.$np.$r"
			else
				{ rivet osu_allreduce -m "1:$smax" -i "$small" -x $((small / 10)); ((max < 16384)) || rivet osu_allreduce -m "16384:$max"; } | rows >"$out/ra.$np.$r"
				rivet osu_barrier -i "$small" -x $((small / 10)) | rows >"$out/rb.$np.$r"
			fi
		done
	done
	progress_done
	median "$out"/ra.$np.* >"$out/ra" && median "$out"/oa.$np.* >"$out/oa"
	median "$out"/rb.$np.* >"$out/rb" && median "$out"/ob.$np.* >"$out/ob"
	perround a $np >"$out/pa" && perround b $np >"$out/pb"
	echo "# $np ranks, $rounds rounds, medians; $(nproc) CPUs, bind-to $bind; ratio: of the medians; per-round: median of the rounds' ratios"
	echo "# osu_allreduce (us)         rivet    open-mpi   ratio per-round"
	side "$out/ra" "$out/oa" "$out/pa"
	echo "# osu_barrier (us)           rivet    open-mpi   ratio per-round"
	side "$out/rb" "$out/ob" "$out/pb"
done
