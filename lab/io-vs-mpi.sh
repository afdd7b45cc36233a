#!/usr/bin/env bash
# io-vs-mpi.sh: rivet bench io beside the same pattern over Debian's Open
# MPI MPI-IO (lab/io.c), on the same file system in the same run, and
# independent large writes beside dd. Prints a table: each side's median
# bandwidth (MiB/s) and the median of the per-round ratios Rivet / other
# (higher is better for Rivet) with its 95% interval.
#
#   ROUNDS=11 DIRS="/dev/shm /var/tmp" bash lab/io-vs-mpi.sh
#
# Each run makes two repetitions and the table takes the second: the
# first time the kernel touches a page of a process costs about 6 us on
# this sandbox (its virtualization shadows page tables), a cost that falls
# on whichever phase first hands the buffer to the kernel (Open MPI's
# direct writes; Rivet's aggregated writes never do, so its first read
# pays it), not on the library.
#
# The patterns, 1 GiB in all:
#   interleaved: -b 1m -t 64m -V -c: a block-cyclic view of 1 MiB blocks,
#     each collective call 64 MiB of interleaved blocks (write, then read);
#   segmented: -b 1m -t 1m -c: IOR's default layout, one block per call;
#   sequential: one process writing 1 GiB in 1 MiB calls, beside dd bs=1M.
# Needs: openmpi-bin libopenmpi-dev (apt).
set -euo pipefail
cd "$(dirname "$0")/.."
. lab/stats.sh
rounds=${ROUNDS:-11}
dirs=${DIRS:-/dev/shm /var/tmp}
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
go build -o "$w/rivet" ./cmd/rivet
go build -o "$w/rivetrun" ./cmd/rivetrun
mpicc.openmpi -O2 -o "$w/ompi-io" lab/io.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

# bw FILE OP: the bandwidth of OP's last repetition in a run's output.
bw() { awk -v op="$2" '$1 == op && $4 ~ /^[0-9]+$/ {b = $2} END {if (b != "") print b; else exit 1}' "$1"; }
row() { # row NAME RIVETFILE OTHERFILE
	echo "| $1 | $(median <"$2") | $(median <"$3") | $(ratios "$2" "$3" | median | decimals 3) | $(ratios "$2" "$3" | median_ci) |"
}
echo "| pattern | Rivet (MiB/s) | reference (MiB/s) | ratio (median of per-round) | 95% interval |"
echo "|---|---|---|---|---|"
for dir in $dirs; do
	key=$(echo "$dir" | tr / _)
	for np in 2 4; do
		bind=core
		((np > $(nproc))) && bind=none # (both launchers' rule)
		segs=$((1024 / np))
		for pat in interleaved segmented; do
			args="-b 1m -t 1m -s $segs -c -i 2"
			[ $pat = interleaved ] && args="-b 1m -t 64m -s $segs -c -V -i 2"
			for ((r = 0; r < rounds; r++)); do
				progress "io-vs-mpi: $dir, $np ranks, $pat, round $((r + 1)) of $rounds"
				order="rivet ompi"
				((r % 2)) && order="ompi rivet"
				for side in $order; do
					if [ $side = rivet ]; then
						"$w/rivetrun" -n "$np" -bind-to "$bind" "$w/rivet" bench io $args -o "$dir/rivet-io.dat" >"$w/out" 2>/dev/null
					else
						mpirun.openmpi -n "$np" --oversubscribe --bind-to "$bind" "$w/ompi-io" $args -o "$dir/ompi-io.dat" >"$w/out" 2>/dev/null
					fi
					for op in write read; do bw "$w/out" $op >>"$w/$key-$np-$pat-$op.$side" || echo - >>"$w/$key-$np-$pat-$op.$side"; done
				done
			done
			progress_done
			for op in write read; do
				f="$w/$key-$np-$pat-$op"
				row "$dir, $np ranks, $pat collective $op (vs Open MPI $(mpirun.openmpi --version | awk 'NR==1 {print $NF}'))" "$f.rivet" "$f.ompi"
			done
		done
	done
	# Sequential: one process, 1 GiB in 1 MiB writes, beside dd.
	for ((r = 0; r < rounds; r++)); do
		progress "io-vs-mpi: $dir, sequential, round $((r + 1)) of $rounds"
		"$w/rivet" bench -np 1 io -b 1g -t 1m -w -o "$dir/rivet-seq.dat" 2>/dev/null | awk '$1 == "write" && $4 ~ /^[0-9]+$/ {print $2}' >>"$w/$key-seq.rivet"
		rm -f "$dir/dd-seq.dat"
		dd if=/dev/zero of="$dir/dd-seq.dat" bs=1M count=1024 2>&1 | awk '/copied/ {for (i = 1; i <= NF; i++) if ($i == "s,") print 1024 / $(i - 1)}' >>"$w/$key-seq.dd"
		rm -f "$dir/dd-seq.dat"
	done
	progress_done
	row "$dir, 1 process, sequential 1 MiB writes (vs dd bs=1M)" "$w/$key-seq.rivet" "$w/$key-seq.dd"
done
