#!/usr/bin/env bash
# Counts the guest instructions (and blocks, lookups and atomics) per
# iteration of Rivet's latency loops and of the references they are
# compared with — perftest on the same rxe
# device, and Open MPI + UCX for osu_latency — in one rxevm VM run with
# the insncount QEMU plugin (lab/qemu/insncount.c). Unlike times, the
# counts do not move with the host's speed spells, so they show exactly
# how much work each program does per iteration, in the kernel and in its
# own code (see lab/insncount/main.go for how work and polling are told
# apart).
#
#   bash lab/insncount.sh                  # all tests
#   TESTS="write_lat:4096 osu_latency" bash lab/insncount.sh
#   TESTS="read_lat:8 atomic_lat:8 rmaloop rmaloop@shm" bash lab/insncount.sh
#       # Rivet's one-sided operations (put, get, fetch-and-op,
#       # compare-and-swap, accumulate; 8 bytes, each with a flush) as
#       # lab/rmaloop runs them, marked by the program around its loops,
#       # beside perftest's read_lat and atomic_lat; @shm over shared
#       # memory. The "own" lines are the issuing rank's code alone.
#   TESTS="osu_bw:4096 send_bw:4096 write_bw:4096" N1=6400 N2=25600 bash lab/insncount.sh
#       # streams, per message: Rivet's and Open MPI's osu_bw (windows of
#       # 64) beside perftest's send and write streams (and rivet perf's
#       # write_bw)
#   TESTS="osu_get_latency osu_fop_latency@shm" bash lab/insncount.sh
#       # the OSU one-sided tests (8 bytes; fop, cas and acc with -T
#       # mpi_long), marked from outside: their start-up and waits count
#
# Each test runs each program twice, with N1 and N2 iterations (default
# 1000 and 4000), after an unmarked warm-up run; the difference of the two
# runs, over N2 - N1, is the count per iteration. Server on vCPU 1, client
# on vCPU 0, as in lab/perftest.sh.
set -euo pipefail
self=$(readlink -f "$0") # for the guest, which starts in the repository's root too
cd "$(dirname "$0")/.."
all="write_lat:8 write_lat:4096 read_lat:8 read_lat:4096 atomic_lat:8 send_lat:8 osu_latency"
tests=${TESTS:-$all}
n1=${N1:-1000} n2=${N2:-4000}

if [ "${1:-}" != --in-vm ]; then
	out=$(mktemp -d /tmp/insncount.XXXXXX)
	[ -n "${KEEP:-}" ] || trap 'rm -rf "$out"' EXIT
	gcc -O2 -Wall -shared -fPIC -fvisibility=hidden -o "$out/insncount.so" lab/qemu/insncount.c
	gcc -O2 -static -nostdlib -fno-pie -no-pie -Wl,--section-start=.text=0x13370000 -o "$out/mark" lab/qemu/mark.c
	CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
	# The one-sided tests' target rank runs a copy linked at another
	# address, so that the counts of the issuing rank's own code (the
	# "own" lines) leave it out wherever each ran.
	bins=("$out/rivet")
	go build -o "$out/rivet" ./cmd/rivet
	if [ -n "$(echo "$tests" | tr ' ' '\n' | grep -v '^rmaloop')" ]; then
		go build -ldflags=-T=0x20001000 -o "$out/rivet-target" ./cmd/rivet
	fi
	if echo " $tests " | grep -q ' rmaloop'; then
		go build -C lab -o "$out/rmaloop" ./rmaloop
		go build -C lab -ldflags=-T=0x20001000 -o "$out/rmaloop-target" ./rmaloop
		bins+=("$out/rmaloop")
	fi
	# rank PROG ARGS...: rank 0 runs BIN/PROG, the others BIN/PROG-target
	printf '#!/bin/sh\np=$1\nshift\n[ "$PMI_RANK" = 0 ] || exec "%s/$p-target" "$@"\nexec "%s/$p" "$@"\n' "$out" "$out" >"$out/rank"
	chmod +x "$out/rank"
	go build -o "$out/rivetrun" ./cmd/rivetrun
	go build -C lab -o "$out/insncount" ./insncount
	case " $tests " in *" osu_latency "* | *" osu_bw:"*) mpicc.openmpi -O2 -o "$out/ompi_osu" bench/osu/testdata/osu.c ;; esac
	cat >"$out/qemu" <<-EOF
		#!/bin/sh
		exec qemu-system-x86_64 "\$@" -plugin $out/insncount.so,out=$out/counts
	EOF
	chmod +x "$out/qemu"
	"$out/rxevm" -q -topology rxe -qemu "$out/qemu" -timeout 40m \
		env BIN="$out" TESTS="$tests" N1="$n1" N2="$n2" bash "$self" --in-vm | tee "$out/log"
	grep '^SECTION ' "$out/log" | cut -d' ' -f2- >"$out/sections"
	echo
	echo "VM kernel $(grep '^KERNEL ' "$out/log" | cut -d' ' -f2-), N1=$n1 N2=$n2"
	"$out/insncount" -counts "$out/counts" -sections "$out/sections" $(printf -- '-bin %s ' "${bins[@]}") -top "${TOP:-0}"
	exit
fi

. lab/rxe-gid.sh
dev=rxe0
gid=$(rxe_gid $dev) || { echo "insncount.sh: no IPv4 RoCE v2 GID on $dev" >&2; exit 1; }
hostname rivet-vm # mpirun refuses to start while the hostname is "(none)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "KERNEL $(uname -r)"
port=19000

# pair BIN ARGS...: a server and a client of a perftest-style program
pair() {
	port=$((port + 1))
	taskset -c 1 "$@" -p $port >/tmp/insn-srv.log 2>&1 &
	local spid=$!
	sleep 0.5
	timeout 120 taskset -c 0 "$@" -p $port 127.0.0.1 2>&1 | grep -E '^ +[0-9]' | tail -1 || true
	wait $spid || true
}
# rivet_rma TEST N [ARGS...]: one of Rivet's OSU one-sided latency tests
rivet_rma() {
	local t=$1 n=$2
	shift 2
	RIVET_PROVIDER=${PROV:-verbs} RIVET_VERBS_DEVICE=$dev timeout 300 "$BIN/rivetrun" -n 2 -bind-to core "$BIN/rank" rivet bench "$t" -x 100 -i "$n" "$@" 2>/dev/null |
		grep -E '^[0-9]' | tail -1 || true
}
rivet_osu() {
	RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=$dev timeout 300 "$BIN/rivetrun" -n 2 "$BIN/rivet" bench osu_latency -m 8:8 -x 100 -i "$1" 2>/dev/null |
		grep -E '^[0-9]' | tail -1 || true
}
ompi_osu() {
	timeout 300 mpirun.openmpi -n 2 --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
		--mca btl ^openib,uct -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=$dev:1 -x UCX_IB_GID_INDEX=0 \
		"$BIN/ompi_osu" latency -m 8:8 -x 100 -i "$1" 2>/dev/null | grep -E '^[0-9]' | tail -1 || true
}
# rivet_bw SIZE N and ompi_bw SIZE N: osu_bw moving N messages of SIZE
# bytes, in windows of 64
rivet_bw() {
	RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=$dev timeout 300 "$BIN/rivetrun" -n 2 "$BIN/rivet" bench osu_bw -m "$1:$1" -W 64 -x 1 -i $(($2 / 64)) 2>/dev/null |
		grep -E '^[0-9]' | tail -1 || true
}
ompi_bw() {
	timeout 300 mpirun.openmpi -n 2 --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
		--mca btl ^openib,uct -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=$dev:1 -x UCX_IB_GID_INDEX=0 \
		"$BIN/ompi_osu" bw -m "$1:$1" -W 64 -x 1 -i $(($2 / 64)) 2>/dev/null | grep -E '^[0-9]' | tail -1 || true
}
# one LABEL N CMD...: a marked run; the plugin's counts between the two
# marks are this run's section
one() {
	local label=$1 n=$2
	shift 2
	"$BIN/mark"
	"$@"
	"$BIN/mark"
	echo "SECTION $label $n"
}
for t in $tests; do
	case $t in
	rmaloop | rmaloop@*)
		# Rivet's put, get, fetch-and-op, compare-and-swap and
		# accumulate, each with a flush, marked by the program itself
		# around its loops (lab/rmaloop); @shm over shared memory.
		prov=verbs
		if [ "$t" != rmaloop ]; then prov=${t#*@}; fi
		RIVET_PROVIDER=$prov RIVET_VERBS_DEVICE=$dev timeout 300 "$BIN/rivetrun" -n 2 -bind-to core "$BIN/rank" rmaloop \
			-n1 "$n1" -n2 "$n2" | sed "s/^SECTION rmaloop \([a-z]*\)/SECTION rmaloop \1@$prov/"
		continue
		;;
	osu_get_latency* | osu_put_latency* | osu_fop_latency* | osu_cas_latency* | osu_acc_latency*)
		# 8 bytes: -m 8:8, or one MPI_LONG; NAME@shm runs over shared
		# memory, else over verbs.
		name=${t%@*}
		export PROV=verbs
		if [ "$name" != "$t" ]; then PROV=${t#*@}; fi
		args=(-m 8:8)
		case $name in osu_fop_latency | osu_cas_latency) args=(-T mpi_long) ;; osu_acc_latency) args=(-m 8:8 -T mpi_long) ;; esac
		rivet_rma "$name" 300 "${args[@]}" >/dev/null
		for n in "$n1" "$n2"; do
			one "rivet $t 8" "$n" rivet_rma "$name" "$n" "${args[@]}"
		done
		continue
		;;
	esac
	if [ "$t" = osu_latency ]; then
		rivet_osu 300 >/dev/null
		ompi_osu 300 >/dev/null
		for n in "$n1" "$n2"; do
			one "rivet osu_latency 8" "$n" rivet_osu "$n"
			one "ompi osu_latency 8" "$n" ompi_osu "$n"
		done
		continue
	fi
	test=${t%%:*} size=${t#*:}
	if [ "$test" = osu_bw ]; then
		# A stream of SIZE-byte messages in OSU's windows of 64, per
		# message: N1 and N2 count messages.
		rivet_bw "$size" 640 >/dev/null
		ompi_bw "$size" 640 >/dev/null
		for n in "$n1" "$n2"; do
			one "rivet osu_bw $size" "$n" rivet_bw "$size" "$n"
			one "ompi osu_bw $size" "$n" ompi_bw "$size" "$n"
		done
		continue
	fi
	rivet=true # rivet perf has no send_bw
	[ "$test" != send_bw ] || rivet=false
	if $rivet; then pair "$BIN/rivet" perf "$test" -d $dev -x "$gid" -s "$size" -n 300 >/dev/null; fi
	pair "ib_$test" -d $dev -x "$gid" -s "$size" -n 300 >/dev/null
	for n in "$n1" "$n2"; do
		if $rivet; then one "rivet $test $size" "$n" pair "$BIN/rivet" perf "$test" -d $dev -x "$gid" -s "$size" -n "$n"; fi
		one "perftest $test $size" "$n" pair "ib_$test" -d $dev -x "$gid" -s "$size" -n "$n"
	done
done
