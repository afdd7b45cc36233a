#!/usr/bin/env bash
# The recovery targets of docs/performance.md: rivet bench ft_recover run
# ROUNDS times (default 11) at 2, 4 and 8 ranks; per round, each recovery
# operation's average over the same run's reference — agree and iagree
# over allreduce (4 B), shrink over comm dup, revoke over barrier — and
# the median of those per-round ratios with its 95% interval, beside the
# medians of the times themselves (µs).
#
#   bash lab/ft-recover.sh shm    # on this host, shared memory
#   bash lab/ft-recover.sh rxe    # over verbs on soft-RoCE, in the VM
#
# ITERS (default 1000; 200 in the VM) iterations per operation per round;
# NPS (default "2 4 8") the numbers of ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
where=${1:-shm}
rounds=${ROUNDS:-11}

if [ "${2:-}" != "--in-vm" ]; then
	out=$(mktemp -d /tmp/rivet-ftrecover.XXXXXX)
	trap 'rm -rf "$out"' EXIT
	CGO_ENABLED=0 go build -o "$out/rivet" ./cmd/rivet
	if [ "$where" = rxe ]; then
		CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
		exec "$out/rxevm" -q -topology rxe -timeout 80m env BIN="$out" ROUNDS="$rounds" ITERS="${ITERS:-200}" NPS="${NPS:-2 4 8}" bash "$0" rxe --in-vm
	fi
	BIN=$out
fi
source lab/stats.sh
iters=${ITERS:-1000}
env=(env RIVET_PROVIDER=shm)
[ "$where" = rxe ] && env=(env RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=rxe0)
w=$(mktemp -d /tmp/rivet-ftrecover-w.XXXXXX)
rows=("barrier" "allreduce (4 B)" "comm dup" "agree" "iagree" "shrink" "revoke" "shrink (1 failed)")
echo "# rivet bench ft_recover -failure, $where, $rounds rounds of $iters iterations; $(nproc) CPUs, kernel $(uname -r)"
echo "| ranks | barrier | allreduce 4 B | comm dup | agree | iagree | shrink | shrink (1 failed) | revoke | agree / allreduce | shrink / dup | revoke / barrier |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for np in ${NPS:-2 4 8}; do
	fail=-failure
	((np < 3)) && fail=
	for ((r = 0; r < rounds; r++)); do
		progress "ft-recover: round $((r + 1)) of $rounds"
		res=$("${env[@]}" "$BIN/rivet" bench -np $np ft_recover -i "$iters" -x $((iters / 10)) $fail 2>/dev/null || true)
		for row in "${rows[@]}"; do
			v=$(awk -v row="$row" '{name = substr($0, 1, 20); sub(/ +$/, "", name)} name == row {print $(NF - 3)}' <<<"$res")
			echo "${v:--}" >>"$w/$np.${row// /_}"
		done
	done
	progress_done
	f() { median <"$w/$np.${1// /_}" | decimals 2; }
	r() { echo "$(ratios "$w/$np.${1// /_}" "$w/$np.${2// /_}" | median | decimals 2) ($(ratios "$w/$np.${1// /_}" "$w/$np.${2// /_}" | median_ci))"; }
	echo "| $np | $(f barrier) | $(f "allreduce (4 B)") | $(f "comm dup") | $(f agree) | $(f iagree) | $(f shrink) | $(f "shrink (1 failed)") | $(f revoke) | $(r agree "allreduce (4 B)") | $(r shrink "comm dup") | $(r revoke barrier) |"
done
rm -rf "$w"
