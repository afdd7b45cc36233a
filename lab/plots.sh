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
	pair() { # pair OUT CMD...: server and client; the client's output to OUT
		local out=$1
		shift
		port=$((port + 1))
		timeout 600 taskset -c 1 "$@" -p $port >/dev/null 2>&1 &
		sleep 0.5
		timeout 600 taskset -c 0 "$@" -p $port 127.0.0.1 >"$out" 2>/dev/null || true
		wait || true
	}
	progress "plots: write_lat"
	pair $res/rxe-write_lat.rivet.txt bin/rivet perf write_lat -d rxe0 -x "$gid" -a -n 1000
	pair $res/rxe-write_lat.perftest.txt ib_write_lat -d rxe0 -x "$gid" -a -n 1000
	progress "plots: write_bw"
	pair $res/rxe-write_bw.rivet.txt bin/rivet perf write_bw -d rxe0 -x "$gid" -a -n 200
	pair $res/rxe-write_bw.perftest.txt ib_write_bw -d rxe0 -x "$gid" -a -n 200
	progress_done
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
	bin/rxevm -q -topology rxe -timeout 30m bash lab/plots.sh --in-vm
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
draw rxe-write_lat "RDMA write latency, soft-RoCE (TCG VM)" "rivet perf,perftest" -y t_typical
draw rxe-write_bw "RDMA write bandwidth, soft-RoCE (TCG VM)" "rivet perf,perftest" -y "BW average"
ls -la $img
