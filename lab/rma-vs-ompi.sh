#!/usr/bin/env bash
# Runs Rivet's OSU one-sided benchmarks side by side with their references,
# in the same run, and prints for each measure the medians and the median
# of the per-round ratios with its 95% interval (lab/stats.sh):
#
#   bash lab/rma-vs-ompi.sh shm   # host, 2 ranks on shared memory:
#                                   # Rivet vs Open MPI's osc/sm
#   bash lab/rma-vs-ompi.sh rxe   # soft-RoCE VM, 2 ranks over verbs:
#                                   # Rivet vs perftest (ib_read_lat,
#                                   # ib_atomic_lat) and Open MPI's osc/ucx
#   ROUNDS=9 ITERS=5000 bash lab/rma-vs-ompi.sh rxe
#
# Open MPI runs the same loops in C (bench/osu/testdata/osu_rma.c, built with
# mpicc.openmpi). Every program is pinned as mpirun pins: rank r (or the
# perftest side r) on CPU r. Within a round the programs run back to back
# in a rotating order, so a slow spell of the machine weighs on both sides
# of a ratio. On shared memory Open MPI runs with osc/sm (its one-sided
# component for MPI_Win_allocate on one node; osc/rdma over vader, which
# it would pick otherwise, crashes on an 8-byte compare-and-swap in
# Debian's 4.1.4). Needs openmpi-bin libopenmpi-dev (and, for rxe, what the VM
# image has: perftest, rdma-core).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-shm}
rounds=${ROUNDS:-7}
case $mode in shm | rxe) ;; *) echo "usage: $0 shm|rxe" >&2; exit 2 ;; esac

if [ "${2:-}" != --in-vm ]; then
	out=$(mktemp -d /tmp/rma-vs-ompi.XXXXXX)
	trap 'rm -rf "$out"' EXIT
	go build -o "$out/rivet" ./cmd/rivet
	go build -o "$out/rivetrun" ./cmd/rivetrun
	mpicc.openmpi -O2 -o "$out/osu_rma" bench/osu/testdata/osu_rma.c
	if [ "$mode" = rxe ]; then
		CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
		"$out/rxevm" -q -topology rxe -timeout 80m env BIN="$out" ROUNDS="$rounds" ITERS="${ITERS:-}" bash "$0" rxe --in-vm
		exit
	fi
	export BIN=$out
fi
. lab/stats.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
w=$(mktemp -d)

row() { grep -E '^[0-9]' | tail -1 | awk '{print $2}'; }
# one FILE CMD...: appends CMD's figure (its last row) to FILE, or "-"
one() {
	local f=$1 v
	shift
	v=$("$@" 2>/dev/null | row) || true
	echo "${v:--}" >>"$f"
}

if [ "$mode" = shm ]; then
	rivet() { timeout 300 "$BIN/rivetrun" -n 2 -bind-to core "$BIN/rivet" bench "$@" $dec; }
	ompi() { timeout 300 mpirun.openmpi -n 2 --bind-to core --mca pml ob1 --mca btl self,vader --mca osc ^rdma,ucx "$BIN/osu_rma" "$@" $dec; }
	lat=(-m 8:8)
	# OSU's two decimals are too few for 0.03 µs; both programs print 4.
	dec=--decimals=4
	# name|OSU args|better|target (Rivet / Open MPI)
	measures=(
		"osu_put_latency 8 B|osu_put_latency ${lat[*]}|lower|1.0"
		"osu_get_latency 8 B|osu_get_latency ${lat[*]}|lower|1.0"
		"osu_acc_latency 8 B|osu_acc_latency ${lat[*]}|lower|1.0"
		"osu_fop_latency (MPI_CHAR)|osu_fop_latency|lower|1.0"
		"osu_fop_latency (MPI_LONG)|osu_fop_latency -T mpi_long|lower|1.0"
		"osu_cas_latency (MPI_CHAR)|osu_cas_latency|lower|1.0"
		"osu_cas_latency (MPI_LONG)|osu_cas_latency -T mpi_long|lower|1.0"
		"osu_put_bw 64 KiB (MB/s)|osu_put_bw -m 65536:65536|higher|0.9"
	)
	for ((r = 0; r < rounds; r++)); do
		progress "rma-vs-ompi: round $((r + 1)) of $rounds"
		for m in "${measures[@]}"; do
			IFS='|' read -r name args _ _ <<<"$m"
			k=$(echo "$name" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' _)
			if ((r % 2)); then
				one "$w/$k.o" ompi $args
				one "$w/$k.r" rivet $args
			else
				one "$w/$k.r" rivet $args
				one "$w/$k.o" ompi $args
			fi
		done
	done
	progress_done
	echo "# one-sided on shared memory, 2 ranks pinned, $rounds rounds; $(nproc) CPUs, $(uname -r)"
	echo "| measure | Rivet | Open MPI osc/sm | Rivet / Open MPI (median, 95% CI) | target |"
	echo "|---|---|---|---|---|"
	for m in "${measures[@]}"; do
		IFS='|' read -r name args better target <<<"$m"
		k=$(echo "$name" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' _)
		cmp="≤"
		[ "$better" = higher ] && cmp="≥"
		printf "| %s | %s | %s | %s (%s) | %s %s |\n" "$name" "$(median <"$w/$k.r")" "$(median <"$w/$k.o")" \
			"$(ratios "$w/$k.r" "$w/$k.o" | median | decimals 3)" "$(ratios "$w/$k.r" "$w/$k.o" | median_ci)" "$cmp" "$target"
	done
	exit
fi

# rxe, inside the VM.
hostname rivet-vm # mpirun refuses to start while the hostname is "(none)"
mountpoint -q /dev/shm || mount -t tmpfs tmpfs /dev/shm
dev=rxe0
. lab/rxe-gid.sh
gid=$(rxe_gid $dev)
iters=${ITERS:-2000}
it=(-i "$iters" -x $((iters / 10)))
rivet() { RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=$dev timeout 300 "$BIN/rivetrun" -n 2 -bind-to core "$BIN/rivet" bench "$@"; }
ompi() {
	timeout 600 mpirun.openmpi -n 2 --oversubscribe --bind-to core --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
		--mca osc ucx --mca btl ^openib,uct -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=$dev:1 -x UCX_IB_GID_INDEX=0 \
		"$BIN/osu_rma" "$@"
}
# perftest TEST ARGS...: t_avg (µs) of one perftest client run, pinned
# as the ranks are; the server is started first and given 2 s (TCG).
perftest() {
	local t=$1 port=$((18800 + RANDOM % 1000))
	shift
	timeout 120 taskset -c 1 "$t" -d $dev -x "$gid" -n "$iters" -p $port "$@" >/dev/null 2>&1 &
	local spid=$!
	sleep 2
	timeout 120 taskset -c 0 "$t" -d $dev -x "$gid" -n "$iters" -p $port "$@" 127.0.0.1 2>/dev/null |
		grep -E '^ +[0-9]' | tail -1 | awk '{print "0", $6}' # t_avg, as a row's column 2
	wait $spid || true
}
# name|OSU args|perftest reference|target over perftest
measures=(
	"osu_put_latency 8 B|osu_put_latency -m 8:8|ib_read_lat -s 8|1.1"
	"osu_get_latency 8 B|osu_get_latency -m 8:8|ib_read_lat -s 8|1.1"
	"osu_fop_latency MPI_LONG|osu_fop_latency -T mpi_long|ib_atomic_lat -A FETCH_AND_ADD|1.1"
	"osu_fop_latency MPI_CHAR|osu_fop_latency|ib_atomic_lat -A FETCH_AND_ADD|2.2"
	"osu_fop_latency MPI_INT|osu_fop_latency -T mpi_int|ib_atomic_lat -A FETCH_AND_ADD|2.2"
	"osu_cas_latency MPI_LONG|osu_cas_latency -T mpi_long|ib_atomic_lat -A CMP_AND_SWAP|1.1"
	"osu_cas_latency MPI_CHAR|osu_cas_latency|ib_atomic_lat -A CMP_AND_SWAP|2.2"
	"osu_cas_latency MPI_INT|osu_cas_latency -T mpi_int|ib_atomic_lat -A CMP_AND_SWAP|2.2"
	"osu_acc_latency 8 B MPI_CHAR|osu_acc_latency -m 8:8|ib_atomic_lat -A FETCH_AND_ADD|2.5"
)
for ((r = 0; r < rounds; r++)); do
	progress "rma-vs-ompi: round $((r + 1)) of $rounds"
	for m in "${measures[@]}"; do
		IFS='|' read -r name args ref _ <<<"$m"
		k=$(echo "$name" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' _)
		for who in $(echo "r p o r p" | cut -d' ' -f$((r % 3 + 1))-$((r % 3 + 3))); do
			case $who in
			r) one "$w/$k.r" rivet $args "${it[@]}" ;;
			p) one "$w/$k.p" perftest $ref ;;
			o) one "$w/$k.o" ompi $args "${it[@]}" ;;
			esac
		done
	done
done
progress_done
echo "# one-sided over soft-RoCE ($dev, loopback RC), 2 ranks pinned, $rounds rounds, -i $iters; $(nproc) vCPUs, $(uname -r)"
echo "| measure | Rivet (µs) | perftest t_avg (µs) | Rivet / perftest (median, 95% CI) | target | Open MPI osc/ucx (µs) | Rivet / Open MPI (median, 95% CI) |"
echo "|---|---|---|---|---|---|---|"
for m in "${measures[@]}"; do
	IFS='|' read -r name args ref target <<<"$m"
	k=$(echo "$name" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' _)
	printf "| %s | %s | %s (%s) | %s (%s) | ≤ %s | %s | %s (%s) |\n" "$name" "$(median <"$w/$k.r")" "$(median <"$w/$k.p")" "${ref%% *}" \
		"$(ratios "$w/$k.r" "$w/$k.p" | median | decimals 3)" "$(ratios "$w/$k.r" "$w/$k.p" | median_ci)" "$target" \
		"$(median <"$w/$k.o")" "$(ratios "$w/$k.r" "$w/$k.o" | median | decimals 3)" "$(ratios "$w/$k.r" "$w/$k.o" | median_ci)"
done
for m in "${measures[@]}"; do
	IFS='|' read -r name _ _ _ <<<"$m"
	k=$(echo "$name" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' _)
	echo "per round, $name: rivet $(tr '\n' ' ' <"$w/$k.r")| perftest $(tr '\n' ' ' <"$w/$k.p")| ompi $(tr '\n' ' ' <"$w/$k.o")"
done
