#!/usr/bin/env bash
# plots.sh: the pictures in docs/performance.md, drawn by `rivet plot`
# from the result files committed in docs/results/.
#
#   bash lab/plots.sh            # draw docs/img/*.svg from docs/results/
#   bash lab/plots.sh measure    # first measure again, then draw
#
# The measurements: on shared memory, 2 ranks pinned, `rivet bench` beside
# the same loops built with Debian's Open MPI (bench/osu/testdata/osu.c,
# vader); on soft-RoCE in an rxevm VM, `rivet perf` beside perftest (the
# server on vCPU 1, the client on vCPU 0). One run each: the pictures
# show the shape; the tables beside them hold the medians over rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
. lab/progress.sh
res=docs/results img=docs/img

if [ "${1:-}" = --in-vm ]; then
	. lab/rxe-gid.sh
	gid=$(rxe_gid rxe0)
	port=18800
	pair() { # pair CMD...: a server and a client; the client's output
		port=$((port + 1))
		timeout 300 taskset -c 1 "$@" -p $port >/dev/null 2>&1 &
		sleep 0.5
		timeout 300 taskset -c 0 "$@" -p $port 127.0.0.1 2>/dev/null || true
		wait || true
	}
	# sweep OUT ITERS SIZES CMD...: CMD at each size; OUT holds the first
	# run's whole output and each later run's row (perftest's -a would
	# go to 8 MiB, hours of ping-pong under TCG).
	sweep() {
		local out=$1 iters=$2 sizes=$3 s
		shift 3
		: >"$out"
		for s in $sizes; do
			progress "plots: ${out##*/}: $s bytes"
			if [ -s "$out" ]; then
				pair "$@" -s "$s" -n "$iters" | grep -E '^ +[0-9]' >>"$out"
			else
				pair "$@" -s "$s" -n "$iters" >"$out"
			fi
		done
	}
	lat="2 8 32 128 512 2048 8192 32768"
	bw="1024 4096 16384 65536 262144 1048576"
	t=$(mktemp -d) # (the VM's writes stay in the VM: the files go out on stdout)
	sweep $t/rxe-write_lat.rivet.txt 1000 "$lat" bin/rivet perf write_lat -d rxe0 -x "$gid"
	sweep $t/rxe-write_lat.perftest.txt 1000 "$lat" ib_write_lat -d rxe0 -x "$gid"
	sweep $t/rxe-write_bw.rivet.txt 200 "$bw" bin/rivet perf write_bw -d rxe0 -x "$gid"
	sweep $t/rxe-write_bw.perftest.txt 200 "$bw" ib_write_bw -d rxe0 -x "$gid"
	progress_done
	for f in $t/*; do
		echo "=== FILE ${f##*/}"
		cat "$f"
	done
	exit
fi

go build -o bin/rivet ./cmd/rivet
if [ "${1:-}" = measure ]; then
	mkdir -p $res
	go build -o bin/rivetrun ./cmd/rivetrun
	CGO_ENABLED=0 go build -o bin/rxevm ./cmd/rxevm
	w=$(mktemp -d)
	trap 'rm -rf "$w"' EXIT
	mpicc.openmpi -O2 -o "$w/osu" bench/osu/testdata/osu.c
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
	for t in latency bw; do
		progress "plots: osu_$t"
		bin/rivetrun -n 2 -bind-to core bin/rivet bench osu_$t 2>/dev/null >$res/shm-osu_$t.rivet.txt
		mpirun.openmpi -n 2 --bind-to core "$w/osu" $t 2>/dev/null >$res/shm-osu_$t.ompi.txt
	done
	progress "plots: osu_allreduce"
	bin/rivetrun -n 4 -bind-to none bin/rivet bench osu_allreduce 2>/dev/null >$res/shm-osu_allreduce-4.rivet.txt
	mpirun.openmpi -n 4 --oversubscribe --bind-to none "$w/osu" allreduce 2>/dev/null >$res/shm-osu_allreduce-4.ompi.txt
	progress_done
	rm -f $res/node-pss.*.txt
	RESULTS=$res bash lab/scale.sh >/dev/null # 8 to 256 processes, some 15 minutes
	bin/rxevm -q -topology rxe -timeout 30m bash lab/plots.sh --in-vm |
		awk -v d=$res '/^=== FILE / {f = d "/" $3; next} f {print > f}'
fi

mkdir -p $img
ompi="Open MPI $(mpirun.openmpi --version 2>/dev/null | awk 'NR == 1 {print $NF}')"
draw() { # draw NAME TITLE LABELS [rivet plot flags...]: NAME's two result files
	local name=$1 title=$2 labels=$3 a b
	shift 3
	a=$(ls $res/$name.rivet.txt) b=$(ls $res/$name.*.txt | grep -v '\.rivet\.txt$')
	bin/rivet plot -o $img/$name.svg -title "$title" -label "$labels" "$@" "$a" "$b"
}
draw shm-osu_latency "osu_latency, shared memory, 2 ranks" "Rivet,$ompi"
draw shm-osu_bw "osu_bw, shared memory, 2 ranks" "Rivet,$ompi"
draw shm-osu_allreduce-4 "osu_allreduce, shared memory, 4 ranks on 2 CPUs" "Rivet,$ompi"
draw node-pss "A node of N processes (2 CPUs): the ranks' summed PSS" "Rivet,$ompi"
draw rxe-write_lat "RDMA write latency, soft-RoCE (TCG VM)" "rivet perf,perftest" -y t_typical
draw rxe-write_bw "RDMA write bandwidth, soft-RoCE (TCG VM)" "rivet perf,perftest" -y "BW average"
# Across two kernels (RESULTS=docs/results bash lab/cross-node.sh writes cross-*.txt; not measured again here).
if [ -s $res/cross-rivet_bw.txt ]; then
	bin/rivet plot -o $img/cross-osu_bw.svg -title "osu_bw across two kernels (rxevm cluster:2, soft-RoCE)" \
		-label "Rivet,$ompi + UCX,ib_write_bw,ib_read_bw" \
		$res/cross-rivet_bw.txt $res/cross-ompi_bw.txt $res/cross-ib_write_bw.txt $res/cross-ib_read_bw.txt
	bin/rivet plot -o $img/cross-osu_latency.svg -title "osu_latency across two kernels (rxevm cluster:2, soft-RoCE)" \
		-label "Rivet,$ompi + UCX,ib_send_lat" \
		$res/cross-rivet_latency.txt $res/cross-ompi_latency.txt $res/cross-ib_send_lat.txt
fi
# The simulated protocols (lab/ftsim.sh writes their CSVs; not measured again here).
bin/rivet plot -o $img/ftsim.svg -title "agreement, shrink and revoke against allreduce and barrier, simulated" \
	-label agree,shrink,allreduce,revoke,barrier $res/ftsim-agree.csv $res/ftsim-shrink.csv $res/ftsim-allreduce.csv $res/ftsim-revoke.csv $res/ftsim-barrier.csv
ls -la $img
