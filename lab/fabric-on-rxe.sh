#!/usr/bin/env bash
# Runs the fabric over soft-RoCE side by side with its references, in one
# VM run, and prints the ratios:
#   - Rivet's osu_latency and osu_bw over the verbs provider (2 ranks,
#     RIVET_PROVIDER=verbs, one rxe device, loopback RC);
#   - the raw verbs figures on the same device: `rivet perf send_lat` and
#     `rivet perf write_bw` (perftest's loops, measured in the issue-3 work
#     at 1.0–1.1× perftest itself);
#   - Debian's Open MPI over UCX (rc_verbs) running the same OSU loops in C
#     (bench/osu/testdata/osu.c), with the settings ../shared/design/peers-on-rxe.md
#     found to work.
#
#   bash lab/fabric-on-rxe.sh          # ROUNDS=5 rounds; medians
#   LAT_ONLY=1 bash lab/fabric-on-rxe.sh   # latency alone
#   PCT=1 LAT_ONLY=1 bash lab/fabric-on-rxe.sh
#       # both osu_latency loops also time each iteration (--percentiles)
#       # and the median and 99th percentile are reported beside the mean
#
# On the host it builds everything and re-runs itself inside rxevm.
set -euo pipefail
cd "$(dirname "$0")/.."
. lab/progress.sh
rounds=${ROUNDS:-5}

if [ "${1:-}" != "--in-vm" ]; then
	out=$(mktemp -d /tmp/fabric-on-rxe.XXXXXX)
	trap 'rm -rf "$out"' EXIT
	CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
	go build -o "$out/rivet" ./cmd/rivet
	go build -o "$out/rivetrun" ./cmd/rivetrun
	mpicc.openmpi -O2 -o "$out/ompi_osu" bench/osu/testdata/osu.c
	exec "$out/rxevm" -q -topology rxe -timeout 40m env BIN="$out" ROUNDS="$rounds" LAT_ONLY="${LAT_ONLY:-}" PCT="${PCT:-}" bash "$0" --in-vm
fi

hostname rivet-vm # mpirun refuses to start while the hostname is "(none)"
dev=rxe0
gid=
for ((i = 0; i < 16; i++)); do # the IPv4-mapped RoCE v2 GID
	p=/sys/class/infiniband/$dev/ports/1
	if [ "$(cat $p/gid_attrs/types/$i 2>/dev/null)" = "RoCE v2" ]; then
		case $(cat $p/gids/$i) in 0000:0000:0000:0000:0000:ffff:*) gid=$i; break ;; esac
	fi
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
w=$(mktemp -d)
touch "$w"/{rl,pl,pt,ol,rb,pb,ob,r50,r99,o50,o99}
pct=()
[ -z "${PCT:-}" ] || pct=(--percentiles)

rivet() { RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=$dev timeout 300 "$BIN/rivetrun" -n 2 "$BIN/rivet" bench "$@" 2>/dev/null; }
ompi() {
	timeout 300 mpirun.openmpi -n 2 --oversubscribe --bind-to core --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
		--mca btl ^openib,uct -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=$dev:1 -x UCX_IB_GID_INDEX=0 \
		"$BIN/ompi_osu" "$@" 2>/dev/null
}
# perf TEST SIZE ITERS COLUMNS: columns of one `rivet perf` client row
perf() {
	local port=$((18800 + RANDOM % 1000))
	# Pinned as the ranks are (mpirun --bind-to core, rivetrun -bind-to
	# core: rank 0 on CPU 0, rank 1 on CPU 1), and as lab/perftest.sh
	# pins perftest. Until session 18 this loop ran unpinned, which made
	# it slower than the ranks it was compared with.
	# The server has a time limit too: one whose client never came would
	# otherwise hold up the whole run at the wait below (one run did, for
	# half an hour, until rxevm's own limit).
	timeout 150 taskset -c 1 "$BIN/rivet" perf "$1" -d $dev -x "$gid" -s "$2" -n "$3" -p $port >/dev/null 2>&1 &
	local spid=$!
	sleep 1
	timeout 120 taskset -c 0 "$BIN/rivet" perf "$1" -d $dev -x "$gid" -s "$2" -n "$3" -p $port 127.0.0.1 2>&1 |
		grep -E '^ +[0-9]' | tail -1 | awk -v c="$4" '{n = split(c, k, ","); s = $k[1]; for (i = 2; i <= n; i++) s = s " " $k[i]; print s}'
	wait $spid || echo "# perf $1 $2: the server ended with status $? (124: killed at its time limit)" >&2
}
row() { grep -E '^[0-9]' | awk '{print $2}' | tail -1; }
# latrow PREFIX: keeps the mean (stdout) and, with PCT, the median and
# 99th percentile in $w/PREFIX50 and $w/PREFIX99
latrow() { grep -E '^[0-9]' | tail -1 | awk -v a="$w/${1}50" -v b="$w/${1}99" 'NF >= 6 {print $3 >>a; print $5 >>b} {print $2}'; }

# The VM drifts between fast and slow spells lasting several runs, so the
# three programs run back to back for each measure (in a rotating order),
# and the ratios are also taken within each round.
lat() {
	case $1 in
	rivet) rivet osu_latency -m 8:8 -i 5000 -x 500 "${pct[@]}" | latrow r >>"$w/rl" ;;
	raw) # t_avg, the mean, is what compares with OSU's mean; t_typical (the median) for reference
		set -- $(perf send_lat 8 5000 6,5)
		echo "${1:-}" >>"$w/pl" && echo "${2:-}" >>"$w/pt" ;;
	ompi) ompi latency -m 8:8 -i 5000 -x 500 "${pct[@]}" | latrow o >>"$w/ol" ;;
	esac
}
bw() {
	case $1 in
	rivet) rivet osu_bw -m 1048576:1048576 -i 10 -x 2 | row >>"$w/rb" ;;
	# BW average: perftest's (and rivet perf's) MB/sec is MiB/s, OSU's MB/s is 10^6 bytes
	raw) perf write_bw 1048576 500 4 | awk '{printf "%.2f\n", $1 * 1.048576}' >>"$w/pb" ;;
	ompi) ompi bw -m 1048576:1048576 -i 10 -x 2 | row >>"$w/ob" ;;
	esac
}
orders=("rivet raw ompi" "raw ompi rivet" "ompi rivet raw")
for ((r = 0; r < rounds; r++)); do
	progress "fabric-on-rxe: round $((r + 1)) of $rounds"
	for who in ${orders[r % 3]}; do lat $who; done
	[ -n "${LAT_ONLY:-}" ] || for who in ${orders[r % 3]}; do bw $who; done
done
progress_done

median() { sort -g "$1" | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else print v[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "nan"}'; }
rl=$(median "$w/rl") rb=$(median "$w/rb") pl=$(median "$w/pl") pb=$(median "$w/pb") ol=$(median "$w/ol") ob=$(median "$w/ob")
echo "# fabric over soft-RoCE ($dev, loopback RC), 2 ranks, $rounds rounds, medians; $(nproc) vCPUs, kernel $(uname -r)"
echo "| measure | rivet osu | raw verbs (rivet perf) | ratio | Open MPI + UCX | ratio |"
echo "|---|---|---|---|---|---|"
echo "| osu_latency 8 B (µs, mean) vs send_lat t_avg | $rl | $pl | $(ratio "$rl" "$pl") | $ol | $(ratio "$rl" "$ol") |"
pt=$(median "$w/pt")
echo "| — against send_lat t_typical (a median: not like for like) | | $pt | $(ratio "$rl" "$pt") | | |"
echo "| osu_bw 1 MiB (MB/s) vs write_bw | $rb | $pb | $(ratio "$rb" "$pb") | $ob | $(ratio "$rb" "$ob") |"
# pairmed A B: the median over rounds of A's value / B's in the same round
pairmed() { paste "$1" "$2" | awk '$2 > 0 {print $1 / $2}' | sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else printf "%.3f", v[int((NR+1)/2)]}'; }
echo "median of per-round ratios: latency rivet/raw $(pairmed "$w/rl" "$w/pl"), rivet/ompi $(pairmed "$w/rl" "$w/ol"); bandwidth rivet/raw $(pairmed "$w/rb" "$w/pb"), rivet/ompi $(pairmed "$w/rb" "$w/ob")"
if [ -n "${PCT:-}" ]; then
	echo "| osu_latency 8 B, median iteration (µs) | $(median "$w/r50") | | | $(median "$w/o50") | $(ratio "$(median "$w/r50")" "$(median "$w/o50")") |"
	echo "| osu_latency 8 B, 99th percentile (µs) | $(median "$w/r99") | | | $(median "$w/o99") | $(ratio "$(median "$w/r99")" "$(median "$w/o99")") |"
	echo "(with PCT the loops read the clock every iteration; their means are not OSU's)"
fi
echo "raw per round: rivet lat $(tr '\n' ' ' <"$w/rl")| send_lat t_avg $(tr '\n' ' ' <"$w/pl")| t_typical $(tr '\n' ' ' <"$w/pt")| ompi lat $(tr '\n' ' ' <"$w/ol")"
echo "raw per round: rivet bw $(tr '\n' ' ' <"$w/rb")| write_bw $(tr '\n' ' ' <"$w/pb")| ompi bw $(tr '\n' ' ' <"$w/ob")"
