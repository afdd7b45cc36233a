#!/usr/bin/env bash
# Runs `rivet perf` and perftest side by side on one soft-RoCE device and
# prints the ratios. It must run where an rxe device exists — normally:
#
#   go build -o bin/rxevm ./cmd/rxevm && go build -o bin/rivet ./cmd/rivet
#   bin/rxevm -topology rxe bash lab/perftest.sh
#
# TESTS (default: all) lists TEST:SIZE pairs, e.g.
# TESTS="write_lat:4096 read_lat:4096"; ITERS (default 5000) sets the
# latency tests' iterations per run.
#
# Each test runs ROUNDS times, alternating which program goes first; the
# figure kept is the median over rounds of perftest's t_typical (itself a
# median) or BW average, with the median of each round's own ratio and a
# 95% interval for that. Server and client are two processes on the device
# (loopback RC), as with perftest's usual single-node use, pinned to CPUs 1
# and 0 (the same for both programs; PIN=0 turns that off): unpinned, the
# scheduler's choices moved medians by ±20% between identical runs; pinned,
# medians are steadier but tails grow (a spinning process delays rxe's
# softirq work on its CPU by up to a time slice).
set -euo pipefail
cd "$(dirname "$0")/.."
rivet=${RIVET:-bin/rivet}
dev=${DEV:-rxe0}
rounds=${ROUNDS:-5}
. lab/rxe-gid.sh
. lab/stats.sh
gid=$(rxe_gid "$dev") || { echo "perftest.sh: no IPv4 RoCE v2 GID on $dev" >&2; exit 1; }
port=18700
srv_cpu=$(($(nproc) - 1))
cli_cpu=0
if [ "${PIN:-1}" = 0 ]; then srv_cpu=0-$srv_cpu cli_cpu=0-$srv_cpu; fi

# run_pair NAME SERVER_CMD... -- CLIENT_CMD...: prints the client's result row
run_pair() {
	local -a srv cli
	while [ "$1" != "--" ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	# A time limit for the server too: one whose client never came would
	# hold up the whole run at the wait below.
	timeout 150 taskset -c "$srv_cpu" "${srv[@]}" >/tmp/perftest-srv.log 2>&1 &
	local spid=$!
	sleep 0.5
	timeout 120 taskset -c "$cli_cpu" "${cli[@]}" 2>&1 | grep -E '^ +[0-9]' | tail -1 || true
	wait $spid || true
}

# measure TEST PERFTEST_BIN SIZE ITERS COLUMN [COLUMN2]: COLUMN is the awk
# field of the row to keep (5 = t_typical for latency, 4 = BW average for
# bandwidth); COLUMN2, if given, a second one reported beside it (3 = t_min,
# the least noisy statistic under emulation, where the latency
# distribution is often bimodal and t_typical swings between its modes).
measure() {
	local test=$1 bin=$2 size=$3 iters=$4 col=$5 col2=${6:-$5} r p r2 p2 extra=
	: >/tmp/perftest-r; : >/tmp/perftest-p; : >/tmp/perftest-r2; : >/tmp/perftest-p2
	for ((i = 0; i < rounds; i++)); do
		progress "perftest: round $((i + 1)) of $rounds"
		port=$((port + 2))
		rivet_cmd() { run_pair "$rivet" perf "$test" -d "$dev" -x "$gid" -s "$size" -n "$iters" -p "$port" -- \
			"$rivet" perf "$test" -d "$dev" -x "$gid" -s "$size" -n "$iters" -p "$port" 127.0.0.1; }
		perftest_cmd() { run_pair "$bin" -d "$dev" -x "$gid" -s "$size" -n "$iters" -p $((port + 1)) -- \
			"$bin" -d "$dev" -x "$gid" -s "$size" -n "$iters" -p $((port + 1)) 127.0.0.1; }
		# one line per round in each file, "-" for a run that printed no
		# row, so that the files' lines pair up round by round
		keep() { awk -v c="$col" -v c2="$col2" -v f="$1" '{print $c >>f; print $c2 >>(f "2")} END {if (NR == 0) {print "-" >>f; print "-" >>(f "2")}}'; }
		if ((i % 2 == 0)); then
			rivet_cmd | keep /tmp/perftest-r
			perftest_cmd | keep /tmp/perftest-p
		else
			perftest_cmd | keep /tmp/perftest-p
			rivet_cmd | keep /tmp/perftest-r
		fi
	done
	progress_done
	ratio() { awk -v r="$1" -v p="$2" 'BEGIN {if (p > 0) printf "%.3f", r / p; else print "nan"}'; }
	# the median over rounds of each round's own ratio, and its interval
	pairmed() { ratios "$1" "$2" | median | decimals 3; }
	pairci() { ratios "$1" "$2" | median_ci; }
	r=$(median </tmp/perftest-r) p=$(median </tmp/perftest-p)
	if [ "$col2" != "$col" ]; then
		r2=$(median </tmp/perftest-r2) p2=$(median </tmp/perftest-p2)
		extra=$(printf ' %9s | %12s | %6s | %9s |' "$r2" "$p2" "$(ratio "$r2" "$p2")" "$(pairmed /tmp/perftest-r2 /tmp/perftest-p2)")
	else
		extra='           |              |        |           |'
	fi
	printf '| %-10s | %8s | %10s | %10s | %6s | %9s | %9s |%s\n' "$test" "$size" "$r" "$p" "$(ratio "$r" "$p")" "$(pairmed /tmp/perftest-r /tmp/perftest-p)" "$(pairci /tmp/perftest-r /tmp/perftest-p)" "$extra"
	printf '%s %s: rivet %s | perftest %s\n' "$test" "$size" "$(tr '\n' ' ' </tmp/perftest-r)" "$(tr '\n' ' ' </tmp/perftest-p)" >>/tmp/perftest-rounds
}

echo "rivet perf vs perftest on $dev (GID $gid), $rounds rounds, ${ITERS:-5000} latency iterations a run, $(nproc) CPUs (server on $srv_cpu, client on $cli_cpu), kernel $(uname -r)"
echo "perftest: $(ib_write_lat --version 2>&1 | head -1)"
echo
: >/tmp/perftest-rounds
echo "| test       |     size |      rivet |   perftest |  ratio | per round |    95% CI | min rivet | min perftest |  ratio | per round |"
echo "|------------|----------|------------|------------|--------|-----------|-----------|-----------|--------------|--------|-----------|"
for t in ${TESTS:-write_lat:8 read_lat:8 write_lat:4096 read_lat:4096 atomic_lat:8 send_lat:8 write_bw:65536 write_bw:1048576}; do
	test=${t%%:*} size=${t#*:}
	case $test in
	*_lat) measure "$test" "ib_$test" "$size" "${ITERS:-5000}" 5 3 ;;
	*_bw) measure "$test" "ib_$test" "$size" $((size > 65536 ? 500 : 5000)) 4 ;;
	*) echo "perftest.sh: unknown test $t" >&2; exit 1 ;;
	esac
done
echo
echo "latency: t_typical in µs (lower is better; ratio ≤ 1.05 is the target); min: t_min, the same way"
echo "ratio: of the medians over rounds; per round: the median of each round's own ratio;"
echo "95% CI: a distribution-free interval for that median (order statistics; '-' with under 6 rounds)"
echo "bandwidth: BW average in MB/s (higher is better; ratio ≥ 0.95 is the target)"
echo
echo "each round's value (t_typical or BW average), in the order run:"
cat /tmp/perftest-rounds
