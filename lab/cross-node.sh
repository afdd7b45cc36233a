#!/usr/bin/env bash
# Point-to-point and one-sided speed across two kernels: an rxevm cluster
# of two VMs (`-topology cluster:2`, one emulated CPU each, soft-RoCE on
# each one's virtio NIC, frames through rxevm's switch), one rank per node.
# Side by side in each round, at every size of SIZES (OSU's, 1 B to
# 4 MiB):
#
#   rivet    rivet bench osu_bw, osu_bibw, osu_latency, osu_put_bw, osu_get_bw
#   ompi     the same OSU loops in C (bench/osu/testdata) under Open MPI 4.1
#            with UCX 1.13 (pml ucx, osc ucx, rc_verbs), launched across the
#            nodes by mpirun through lab/rexec
#   raw      the raw streams on the same link: perftest's ib_send_bw,
#            ib_write_bw, ib_read_bw and rivet perf write_bw, read_bw; for
#            latency, ib_send_lat and rivet perf send_lat (t_avg, the mean,
#            as OSU reports)
#
#   bash lab/cross-node.sh                       # ROUNDS=5
#   ROUNDS=3 SIZES="4096 65536" TESTS="bw raw_bw" bash lab/cross-node.sh
#   RESULTS=docs/results bash lab/cross-node.sh  # also writes each program's medians, cross-PROG.txt, for rivet plot
#       # (a run of some SIZES replaces those rows of the files there)
#   WHY="rivet_bw ompi_bw ib_send_bw ib_send_bw:-e ib_write_bw perf_write_bw" PSIZE=8192 bash lab/cross-node.sh
#       # one run each, with where each node's CPU went and rxe's counters
#       # (PROG:ARG,… adds ARGs to a raw stream's command line; PSIZE may
#       # list sizes)
#   VARIANTS="r64=/tmp/rivet-r64" TESTS=bw bash lab/cross-node.sh
#       # other builds of rivet beside the work tree's, each round: osu_bw,
#       # osu_bibw and osu_latency tables of each against it (WHY runs one
#       # as rivet_bw@NAME)
#
# RIVET= and RXEVM= name other builds of rivet and rxevm to run instead of
# the work tree's; TRACE=1 traces the script (set -x) in the VM.
#
# TESTS picks from bw bibw latency put_bw get_bw (each Rivet's and Open
# MPI's), raw_bw and raw_lat (default: all). Each round runs the programs
# in a rotated order; the tables give, per size, the medians and the median
# of per-round ratios with its 95% interval (lab/stats.sh): Rivet over the
# best raw stream of the same round, and over Open MPI + UCX. perftest and
# rivet perf report MiB/s; they are converted to OSU's MB/s (10^6 bytes).
#
# The emulated link moves a few MB/s, so the counts shrink with the size:
# OSU's window of 64 up to 8 KiB, 16 up to 256 KiB, 4 above, and about
# BUDGET bytes (default 4 MB) at the largest size of each band; the raw
# streams move as many messages as the OSU loop times.
set -euo pipefail
[ -z "${TRACE:-}" ] || set -x
cd "$(dirname "$0")/.."
. lab/stats.sh
rounds=${ROUNDS:-5}
tests=${TESTS:-bw bibw latency put_bw get_bw raw_bw raw_lat}
sizes=${SIZES:-$(s=1; while ((s <= 4194304)); do printf '%d ' $s; s=$((s * 2)); done)}
budget=${BUDGET:-4000000}

if [ "${1:-}" != --in-vm ]; then
	out=$(mktemp -d /tmp/rivet-cross.XXXXXX)
	trap 'rm -rf "$out"' EXIT
	if [ -n "${RXEVM:-}" ]; then # another build of rxevm
		cp "$RXEVM" "$out/rxevm"
	else
		CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
	fi
	if [ -n "${RIVET:-}" ]; then # another build of rivet
		cp "$RIVET" "$out/rivet"
	else
		go build -o "$out/rivet" ./cmd/rivet
	fi
	for v in ${VARIANTS:-}; do # NAME=PATH: other builds of rivet, for WHY's rivet_bw@NAME
		cp "${v#*=}" "$out/rivet-${v%%=*}"
	done
	(cd lab && go build -o "$out/rexec" ./rexec)
	mpicc.openmpi -O2 -o "$out/osu" bench/osu/testdata/osu.c
	mpicc.openmpi -O2 -o "$out/osu_rma" bench/osu/testdata/osu_rma.c
	"$out/rxevm" -q -v -topology cluster:2 -timeout "${TIMEOUT:-120m}" \
		-node-cmd "exec $out/rexec -listen 192.0.2.2:7022" \
		-- env BIN="$out" ROUNDS="$rounds" TESTS="$tests" SIZES="$sizes" BUDGET="$budget" RESULTS="${RESULTS:+1}" \
		WHY="${WHY:-}" PSIZE="${PSIZE:-}" TRACE="${TRACE:-}" \
		bash "$0" --in-vm >"$out/vm" || status=$?
	if [ -n "${RESULTS:-}" ]; then # the VM's files come out on its stdout
		awk -v d="$RESULTS" '/^=== FILE /{f = d "/" $3 ".new"; printf "" >f; next} f {print >>f; next} {print}' "$out/vm"
		# A run of some sizes replaces those rows of a file there
		# already and keeps the others, its title saying so.
		for f in "$RESULTS"/cross-*.txt.new; do
			[ -e "$f" ] || continue
			old=${f%.new}
			if [ -s "$old" ]; then
				awk 'FNR == NR { if ($1 !~ /^#/) row[$1] = $0; else if (FNR == 1) title = $0; next }
					FNR == 1 && /^# / { old = substr($0, 3); next }
					/^#/ { next }
					!($1 in row) { row[$1] = $0; kept = 1 }
					END {
						print title (kept ? "; the other sizes: " old : "")
						print "# Size      Value"
						fflush()
						for (s in row) print row[s] | "sort -n"
					}' "$f" "$old" >"$f.merged"
				mv "$f.merged" "$old"
				rm "$f"
			else
				mv "$f" "$old"
			fi
		done
	else
		sed '/^=== FILE /,$d' "$out/vm"
	fi
	exit "${status:-0}"
fi

. lab/rxe-gid.sh
gid=$(rxe_gid rxe0)
node2=192.0.2.2
w=$(mktemp -d)
r=0 # the round
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
on2() { "$BIN/rexec" $node2 "$@"; }
"$BIN/rexec" -w 3m $node2 true # node 2 may still be booting

# The sizes in bands that share their counts: OSU's window of 64 up to
# 8 KiB, 16 up to 256 KiB, 4 above; the iterations such that the band's
# largest size moves about BUDGET bytes (at least 2).
band() { # band B: band B's sizes (of SIZES)
	local s b
	for s in $sizes; do
		b=1
		((s > 8192)) && b=2
		((s > 262144)) && b=3
		if ((b == $1)); then printf '%d ' $s; fi
	done
}
counts() { # counts B: "-W window -i iterations -x warm-up" for band B
	local win=(0 64 16 4) top=(0 8192 262144 4194304) it
	it=$((budget / (${top[$1]} * ${win[$1]})))
	((it < 2)) && it=2
	echo "-W ${win[$1]} -i $it -x 1"
}
lcounts() { # lcounts B: "-i iterations -x warm-up" for latency in band B
	local it=(0 200 10 2)
	echo "-i ${it[$1]} -x 1"
}
# nmsgs SIZE: how many messages a raw stream moves at SIZE: as many as the
# OSU loop times there (at least 5, perftest's least).
nmsgs() {
	local b=1 c
	(($1 > 8192)) && b=2
	(($1 > 262144)) && b=3
	c=($(counts $b))
	echo $((c[1] * c[3] > 5 ? c[1] * c[3] : 5))
}

# rows PROG SIZES…: from OSU output on stdin, appends each size's figure to
# $w/PROG.SIZE, "-" for a size with no row (the program failed first).
rows() {
	local prog=$1 s v
	shift
	local out
	out=$(grep -E '^[0-9]' || true)
	local line="# round $((r + 1)): $prog"
	for s in "$@"; do
		v=$(awk -v s="$s" '$1 == s {print $2}' <<<"$out" | tail -1)
		echo "${v:--}" >>"$w/$prog.$s"
		line+=" $s=${v:--}"
	done
	echo "$line" >&2 # as it comes: a run cut short keeps what it measured
}

# rivet BENCH MIN:MAX ARGS…: rivet bench BENCH as a job of two ranks, rank 1
# on node 2 (torchrun-style variables); rank 0's output. port is bumped by
# the caller.
port=29500
rivet() {
	local b=$1 m=$2
	shift 2
	local env="WORLD_SIZE=2 MASTER_ADDR=192.0.2.1 MASTER_PORT=$port RIVET_JOB_SECRET=lab"
	on2 "RANK=1 $env timeout 900 $BIN/${RBIN:-rivet} bench $b -m $m $* >/dev/null 2>&1" &
	local rank1=$!
	env RANK=0 $env timeout 900 "$BIN/${RBIN:-rivet}" bench "$b" -m "$m" "$@" 2>/dev/null &
	local rank0=$!
	# A rank 1 that could not run leaves rank 0 waiting for it: end it.
	wait $rank1 || kill $rank0 2>/dev/null || true
	wait $rank0 || true
}
# ompi PROG NAME MIN:MAX ARGS…: the C loop across the nodes; rank 0's output.
ompi() {
	local p=$1 n=$2 m=$3
	shift 3
	timeout 900 mpirun.openmpi -n 2 --host node1:1,node2:1 --bind-to none \
		--mca plm_rsh_agent "$BIN/rexec" --mca oob_tcp_if_include eth0 \
		--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc ucx --mca btl ^openib,uct \
		-x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=rxe0:1 -x UCX_IB_GID_INDEX="${UCX_GID:-0}" \
		"$BIN/$p" "$n" -m "$m" "$@" 2>/dev/null || true
}
# pair COL CMD…: CMD's server on node 2 and its client here (retried until
# the server listens), at port pport (bumped by the caller); column COL of
# the client's last row, or nothing.
pport=18800
pair() {
	local col=$1 try o=
	shift
	on2 "timeout 900 $* -p $pport >/dev/null 2>&1" &
	local server=$!
	for ((try = 0; try < 50; try++)); do
		o=$(timeout 900 "$@" -p $pport $node2 2>/dev/null) && break
		o=
		sleep 0.2
	done
	wait $server || true
	{ grep -E '^ +[0-9]' <<<"$o" || true; } | tail -1 | awk -v c="$col" '{print $c}'
}
# raw FILE COL CMD…: one raw figure (times $SCALE, default 1) appended to
# FILE, "-" when there was none.
raw() {
	local f=$1 col=$2 v
	shift 2
	pport=$((pport + 1))
	v=$(pair "$col" "$@")
	[ -n "$v" ] && v=$(awk -v v="$v" -v k="${SCALE:-1}" 'BEGIN {printf "%.3f", v * k}')
	echo "${v:--}" >>"$f"
	echo "# round $((r + 1)): ${f##*/}=${v:--}" >&2
}

# measure WHAT: one round of WHAT at every size.
measure() {
	local what=$1 b s m sz
	for b in 1 2 3; do
		sz=$(band $b)
		[ -n "$sz" ] || continue
		set -- $sz
		m=$1:${!#}
		progress "cross-node: round $((r + 1)) of $rounds, $what, $m bytes"
		port=$((port + 1))
		case $what in
		bw | bibw)
			rivet "osu_$what" $m $(counts $b) --decimals 4 | rows "rivet_$what" $sz
			for v in ${VARIANTS:-}; do
				RBIN=rivet-${v%%=*} rivet "osu_$what" $m $(counts $b) --decimals 4 | rows "rivet@${v%%=*}_$what" $sz
			done
			ompi osu "$what" $m $(counts $b) --decimals 4 | rows "ompi_$what" $sz
			;;
		put_bw | get_bw)
			rivet "osu_$what" $m $(counts $b) --decimals 4 | rows "rivet_$what" $sz
			ompi osu_rma "osu_$what" $m $(counts $b) --decimals 4 | rows "ompi_$what" $sz
			;;
		latency)
			rivet osu_latency $m $(lcounts $b) | rows rivet_latency $sz
			for v in ${VARIANTS:-}; do
				RBIN=rivet-${v%%=*} rivet osu_latency $m $(lcounts $b) | rows "rivet@${v%%=*}_latency" $sz
			done
			ompi osu latency $m $(lcounts $b) | rows ompi_latency $sz
			;;
		raw_bw) # MiB/s, made MB/s
			for s in $sz; do
				for t in send write read; do
					SCALE=1.048576 raw "$w/ib_${t}_bw.$s" 4 ib_${t}_bw -d rxe0 -x "$gid" -s "$s" -n "$(nmsgs "$s")" -F
				done
				for t in write read; do
					SCALE=1.048576 raw "$w/perf_${t}_bw.$s" 4 "$BIN/rivet" perf ${t}_bw -d rxe0 -x "$gid" -s "$s" -n "$(nmsgs "$s")"
				done
			done
			;;
		raw_lat) # t_avg, column 6 of both
			local c=($(lcounts $b))
			for s in $sz; do
				raw "$w/ib_send_lat.$s" 6 ib_send_lat -d rxe0 -x "$gid" -s "$s" -n $((c[1] > 5 ? c[1] : 5)) -F
				raw "$w/perf_send_lat.$s" 6 "$BIN/rivet" perf send_lat -d rxe0 -x "$gid" -s "$s" -n $((c[1] > 5 ? c[1] : 5))
			done
			;;
		esac
	done
}

# snapshot: this node's CPU split (/proc/stat's first line: user nice
# system idle iowait irq softirq) and rxe0's counters, on one line.
snapshot() {
	local c=/sys/class/infiniband/rxe0/ports/1/hw_counters f
	head -1 /proc/stat | cut -d' ' -f3-9 | tr '\n' ' '
	for f in sent_pkts rcvd_pkts rcvd_seq_err out_of_seq_request duplicate_request completer_retry_err retry_exceeded_err send_rnr_err rcvd_rnr_err; do
		printf '%s ' "$(cat $c/$f 2>/dev/null || echo 0)"
	done
	echo
}
# why PROG[:ARG,…] SIZE: one run of PROG (a word of measure's or a raw
# stream) at SIZE, with where each node's CPU went and what rxe counted
# meanwhile; ARGs go to a raw stream's command line (ib_send_bw:-e waits
# for completions by event instead of polling).
why() {
	local s=$2 b=1 a1 a2 z1 z2 v p=${1%%:*} args=()
	[[ $1 != *:* ]] || IFS=, read -ra args <<<"${1#*:}"
	(($s > 8192)) && b=2
	(($s > 262144)) && b=3
	a1=$(snapshot) a2=$(on2 "$(declare -f snapshot); snapshot")
	case $p in
	rivet_*) # rivet_bw@NAME: the build NAME of VARIANTS
		local RBIN=rivet
		[[ $p != *@* ]] || RBIN=rivet-${p#*@}
		port=$((port + 1)); v=$(rivet "osu_$(sed 's/^rivet_//; s/@.*//' <<<"$p")" $s:$s $(counts $b) | grep -E '^[0-9]' | awk '{print $2}') ;;
	ompi_*) v=$(ompi osu "${p#ompi_}" $s:$s $(counts $b) | grep -E '^[0-9]' | awk '{print $2}') ;;
	perf_*) pport=$((pport + 1)); v=$(pair 4 "$BIN/rivet" perf "${p#perf_}" -d rxe0 -x "$gid" -s "$s" -n "$(nmsgs "$s")" "${args[@]}") ;;
	ib_*) pport=$((pport + 1)); v=$(pair 4 "$p" -d rxe0 -x "$gid" -s "$s" -n "$(nmsgs "$s")" -F "${args[@]}") ;;
	esac
	z1=$(snapshot) z2=$(on2 "$(declare -f snapshot); snapshot")
	echo "### $1 at $s bytes: ${v:-no figure} (perftest and rivet perf: MiB/s)"
	for n in 1 2; do
		local a=a$n z=z$n
		tr ' ' '\n' <<<"${!a}" >"$w/why.a" # (no /dev/fd in the VM for <(…))
		tr ' ' '\n' <<<"${!z}" >"$w/why.z"
		paste "$w/why.a" "$w/why.z" | awk -v n=$n '
			NF == 2 {d[++k] = $2 - $1}
			END {
				t = d[1] + d[2] + d[3] + d[4] + d[5] + d[6] + d[7]; if (t <= 0) t = 1
				printf "node%d CPU: user %.0f%%, system %.0f%%, irq+softirq %.0f%%, idle %.0f%%;", n, 100 * (d[1] + d[2]) / t, 100 * d[3] / t, 100 * (d[6] + d[7]) / t, 100 * (d[4] + d[5]) / t
				split("sent rcvd seq_err out_of_seq dup completer_retry retry_exceeded send_rnr rcvd_rnr", name, " ")
				printf " rxe:"; for (i = 1; i <= 9; i++) if (d[7 + i] != 0) printf " %s %d", name[i], d[7 + i]; print ""
			}'
	done
}
if [ -n "${WHY:-}" ]; then # WHY="rivet_bw ompi_bw ib_write_bw …": the diagnosis alone
	for s in ${PSIZE:-8192}; do
		for p in $WHY; do why "$p" "$s"; done
	done
	exit
fi

for ((r = 0; r < rounds; r++)); do
	set -- $tests
	((r % $#)) && set -- "${@:r % $# + 1}" "${@:1:r % $#}" # a rotated order
	for what in "$@"; do
		measure "$what"
	done
done
progress_done

# best SIZE FILE…: per round, the highest of FILEs' values at SIZE.
best() {
	local s=$1
	shift
	paste "${@/%/.$s}" | awk '{b = "-"; for (i = 1; i <= NF; i++) if ($i != "-" && (b == "-" || $i > b)) b = $i; print b}'
}
cell() { [ -s "$1" ] && median <"$1" | decimals "${2:-2}" || echo "—"; }
ratiocell() { # ratiocell A B: the median of per-round ratios [interval]
	[ -s "$1" ] && [ -s "$2" ] || { echo "—"; return; }
	echo "$(ratios "$1" "$2" | median | decimals 3) [$(ratios "$1" "$2" | median_ci)]"
}
echo "# across two kernels (rxevm cluster:2, one TCG vCPU a node), $rounds rounds, kernel $(uname -r)"
for what in bw bibw put_bw get_bw; do
	[[ " $tests " == *" $what "* ]] || continue
	raws=(ib_write_bw perf_write_bw)
	case $what in
	bw | bibw) raws=(ib_send_bw ib_write_bw ib_read_bw perf_write_bw perf_read_bw) ;;
	get_bw) raws=(ib_read_bw perf_read_bw) ;;
	esac
	echo
	echo "## osu_$what (MB/s)"
	echo "| size | Rivet | Open MPI + UCX | $(IFS='|'; echo "${raws[*]}" | sed 's/|/ | /g') | Rivet / best raw | Rivet / Open MPI |"
	echo "|---:|---:|---:|$(printf -- '---:|%.0s' "${raws[@]}")---|---|"
	for s in $sizes; do
		line="| $s | $(cell "$w/rivet_$what.$s") | $(cell "$w/ompi_$what.$s")"
		for x in "${raws[@]}"; do line+=" | $(cell "$w/$x.$s")"; done
		have=()
		for x in "${raws[@]}"; do [ -s "$w/$x.$s" ] && have+=("$w/$x"); done
		if ((${#have[@]})); then
			best "$s" "${have[@]}" >"$w/best.$s"
		else
			: >"$w/best.$s"
		fi
		# bibw moves twice what one stream does: against twice the stream
		if [ $what = bibw ] && [ -s "$w/best.$s" ]; then
			awk '$1 != "-" {$1 *= 2} {print}' "$w/best.$s" >"$w/best2.$s" && mv "$w/best2.$s" "$w/best.$s"
		fi
		echo "$line | $(ratiocell "$w/rivet_$what.$s" "$w/best.$s") | $(ratiocell "$w/rivet_$what.$s" "$w/ompi_$what.$s") |"
	done
done
for v in ${VARIANTS:-}; do
	v=${v%%=*}
	for what in bw bibw latency; do
		[[ " $tests " == *" $what "* ]] || continue
		echo
		echo "## osu_$what of build $v ($([ $what = latency ] && echo µs || echo MB/s))"
		echo "| size | $v | $v / Rivet | $v / Open MPI |"
		echo "|---:|---:|---|---|"
		for s in $sizes; do
			echo "| $s | $(cell "$w/rivet@${v}_$what.$s") | $(ratiocell "$w/rivet@${v}_$what.$s" "$w/rivet_$what.$s") | $(ratiocell "$w/rivet@${v}_$what.$s" "$w/ompi_$what.$s") |"
		done
	done
done
if [[ " $tests " == *" latency "* ]]; then
	echo
	echo "## osu_latency (µs, one way)"
	echo "| size | Rivet | Open MPI + UCX | ib_send_lat t_avg | rivet perf send_lat t_avg | Rivet / ib_send_lat | Rivet / Open MPI |"
	echo "|---:|---:|---:|---:|---:|---|---|"
	for s in $sizes; do
		echo "| $s | $(cell "$w/rivet_latency.$s") | $(cell "$w/ompi_latency.$s") | $(cell "$w/ib_send_lat.$s") | $(cell "$w/perf_send_lat.$s") | $(ratiocell "$w/rivet_latency.$s" "$w/ib_send_lat.$s") | $(ratiocell "$w/rivet_latency.$s" "$w/ompi_latency.$s") |"
	done
fi
echo
echo "raw values per round (\"-\": the program gave no figure):"
for f in "$w"/*.*; do
	case ${f##*/} in best.*) continue ;; esac
	echo "${f##*/}: $(tr '\n' ' ' <"$f")"
done

# The curves for lab/plots.sh: each program's medians, as OSU rows.
if [ -n "${RESULTS:-}" ]; then
	for f in "$w"/*.*; do
		case ${f##*/} in best.*) continue ;; esac
		echo "${f##*/}"
	done | sed 's/\.[0-9]*$//' | sort -u | while read -r prog; do
		echo "=== FILE cross-$prog.txt"
		echo "# $prog across two kernels (rxevm cluster:2), the median of $rounds rounds"
		echo "# Size      Value"
		for s in $sizes; do
			[ -s "$w/$prog.$s" ] && printf '%-10d%18s\n' "$s" "$(median <"$w/$prog.$s" | decimals 4)"
		done
	done
fi
