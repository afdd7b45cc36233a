#!/usr/bin/env bash
# Runs one latency test of `rivet perf` and of perftest with -U (every
# iteration, in the order measured) and says, per run, how its iterations
# split between a fast and a slow state. Under TCG the same loop runs in
# one of two states that last hundreds to thousands of iterations, and a
# run's t_typical is the median of whichever state held most of it; this
# shows the two states apart. Like perftest.sh, it must run where an rxe
# device exists, normally:
#
#   go build -o bin/rxevm ./cmd/rxevm && go build -o bin/rivet ./cmd/rivet
#   TEST=write_lat SIZE=4096 ROUNDS=6 bin/rxevm -topology rxe bash lab/perftest-iters.sh
#
# An iteration is "slow" when it takes 1.45× the run's fastest or more
# (the two states' medians are 1.3–2.5× apart). Per run it prints the
# minimum and median, the share of fast iterations and each state's
# median, and how the slow iterations come: how many stretches of them,
# their mean and longest length, and the slow share in each tenth of the
# run. The first 10 iterations (warm-up) are left out. At the end it
# compares the programs over the rounds: the run medians, each state's
# median and the slow share, as per-round ratios with 95% intervals. The
# states are the host's, not the VM's or the programs' (see
# lab/hostspeed and docs/performance.md, session 15).
set -euo pipefail
cd "$(dirname "$0")/.."
rivet=${RIVET:-bin/rivet}
dev=${DEV:-rxe0}
test=${TEST:-write_lat}
size=${SIZE:-4096}
iters=${ITERS:-5000}
rounds=${ROUNDS:-6}
. lab/rxe-gid.sh
. lab/stats.sh
gid=$(rxe_gid "$dev") || { echo "perftest-iters.sh: no IPv4 RoCE v2 GID on $dev" >&2; exit 1; }
port=18900
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME CMD...: runs server (CPU 1) and client (CPU 0), prints the
# run's summary and adds a line to $tmp/rec-NAME: the run's median, each
# state's median ("-" for a state holding under 5% of the iterations, too
# few for a median to compare) and the slow state's share in per cent
run() {
	local name=$1
	shift
	local -a cmd=("$@" -d "$dev" -x "$gid" -s "$size" -n "$iters" -U -p "$port")
	taskset -c 1 "${cmd[@]}" >/dev/null 2>&1 &
	local spid=$!
	sleep 0.5
	timeout 120 taskset -c 0 "${cmd[@]}" 127.0.0.1 >"$tmp/out" 2>&1 || true
	wait $spid || true
	port=$((port + 1))
	awk '/^#, usec/ {on = 1; next} on && /^[0-9]+, / {print $2; next} {on = 0}' "$tmp/out" | tail -n +11 >"$tmp/v"
	if [ ! -s "$tmp/v" ]; then
		echo "$name: no iterations listed" >&2
		echo "- - - -" >>"$tmp/rec-$name"
		return
	fi
	local min med thr
	min=$(sort -g "$tmp/v" | awk 'NR == 1')
	med=$(median <"$tmp/v" | decimals 2)
	thr=$(awk -v m="$min" 'BEGIN {print 1.45 * m}')
	local fastmed slowmed
	fastmed=$(awk -v t="$thr" '$1 < t' "$tmp/v" | median | decimals 2)
	slowmed=$(awk -v t="$thr" '$1 >= t' "$tmp/v" | median | decimals 2)
	awk -v t="$thr" -v name="$name" -v min="$min" -v med="$med" -v fm="$fastmed" -v sm="$slowmed" -v rec="$tmp/rec-$name" '
		{v[NR] = $1}
		END {
			n = NR; fast = 0; runs = 0; cur = 0; longest = 0; slow = 0
			for (i = 1; i <= n; i++) {
				if (v[i] < t) { fast++; if (cur) { runs++; slow += cur; if (cur > longest) longest = cur; cur = 0 } }
				else cur++
			}
			if (cur) { runs++; slow += cur; if (cur > longest) longest = cur }
			tenths = ""
			for (k = 0; k < 10; k++) {
				a = int(k * n / 10) + 1; b = int((k + 1) * n / 10); s = 0
				for (i = a; i <= b; i++) if (v[i] >= t) s++
				tenths = tenths sprintf(" %3d", 100 * s / (b - a + 1))
			}
			printf "%-9s min %7.2f median %7.2f | fast %3d%% (median %7s), slow median %7s | %4d slow stretches, mean %6.1f, longest %5d | slow %% by tenth:%s\n",
				name, min, med, 100 * fast / n, fm, sm, runs, (runs ? slow / runs : 0), longest, tenths
			printf "%s %s %s %.1f\n", med, (fast >= 0.05 * n ? fm : "-"), (n - fast >= 0.05 * n ? sm : "-"), 100 * (n - fast) / n >>rec
		}' "$tmp/v"
}

echo "rivet perf and perftest, $test $size B, $iters iterations, $rounds rounds, on $dev (GID $gid); µs"
for ((r = 0; r < rounds; r++)); do
	progress "perftest-iters: round $((r + 1)) of $rounds"
	if ((r % 2 == 0)); then
		run rivet "$rivet" perf "$test"
		run perftest "ib_$test"
	else
		run perftest "ib_$test"
		run rivet "$rivet" perf "$test"
	fi
done
progress_done

# Over the rounds: the two programs' run medians (t_typical) are mixtures
# of the two states in whatever shares the host's spells gave each run;
# each state's median compares them within one state.
[ -s "$tmp/rec-rivet" ] && [ -s "$tmp/rec-perftest" ] || exit 0
echo
echo "over $rounds rounds: medians over the rounds (µs), and rivet / perftest within each round: median [95% CI] of the rounds with a value"
summary() { # LABEL COLUMN
	cut -d' ' -f"$2" "$tmp/rec-rivet" >"$tmp/a"
	cut -d' ' -f"$2" "$tmp/rec-perftest" >"$tmp/b"
	printf '%-24s rivet %8s  perftest %8s | per round %s [%s], %d rounds\n' "$1" "$(median <"$tmp/a" | decimals 2)" "$(median <"$tmp/b" | decimals 2)" \
		"$(ratios "$tmp/a" "$tmp/b" | median | decimals 3)" \
		"$(ratios "$tmp/a" "$tmp/b" | median_ci)" "$(ratios "$tmp/a" "$tmp/b" | wc -l)"
}
summary "run median (t_typical)" 1
summary "fast state's median" 2
summary "slow state's median" 3
cut -d' ' -f4 "$tmp/rec-rivet" >"$tmp/a"
cut -d' ' -f4 "$tmp/rec-perftest" >"$tmp/b"
printf 'slow share (%%)           rivet %8s  perftest %8s | rounds where rivet'"'"'s is the larger: %s of %s\n' "$(median <"$tmp/a")" "$(median <"$tmp/b")" \
	"$(paste "$tmp/a" "$tmp/b" | awk '$1 != "-" && $2 != "-" && $1 > $2' | wc -l)" "$(paste "$tmp/a" "$tmp/b" | awk '$1 != "-" && $2 != "-"' | wc -l)"
