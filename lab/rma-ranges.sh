#!/usr/bin/env bash
# What range records cost (docs/rma.md, "Which memory is undefined"):
# osu_put_latency (8 B) and osu_put_bw (64 KiB), OSU's defaults (allocated
# window, lock and flush), with records on (the default) against
# RIVET_RMA_RANGES=off, in one run, alternating which goes first; prints
# the median of per-round ratios (on / off) with its 95% interval. Both
# print 4 decimals.
#
#   bash lab/rma-ranges.sh shm    # 2 ranks on this host, shared memory, pinned
#   bash lab/rma-ranges.sh rxe    # 2 ranks over verbs on soft-RoCE, in the VM
#
# ROUNDS (default 15) rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
where=${1:-shm}
rounds=${ROUNDS:-15}

if [ "${2:-}" != "--in-vm" ]; then
	out=$(mktemp -d /tmp/rivet-ranges.XXXXXX)
	trap 'git worktree remove --force "$out/src" 2>/dev/null; rm -rf "$out"' EXIT
	git worktree add -q --detach "$out/src" HEAD
	(cd "$out/src" && CGO_ENABLED=0 go build -o "$out/rivet" ./cmd/rivet && CGO_ENABLED=0 go build -o "$out/rivetrun" ./cmd/rivetrun)
	if [ "$where" = rxe ]; then
		CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
		exec "$out/rxevm" -q -topology rxe -timeout 40m env BIN="$out" ROUNDS="$rounds" bash "$0" rxe --in-vm
	fi
	BIN=$out
fi
source lab/stats.sh

w=$(mktemp -d)
run() { # on|off BENCH ARGS...: the figure of the one row it prints
	local side=$1 env=(env)
	shift
	[ "$where" = rxe ] && env+=(RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=rxe0)
	[ "$side" = off ] && env+=(RIVET_RMA_RANGES=off)
	timeout 300 "${env[@]}" "$BIN/rivetrun" -n 2 -bind-to core "$BIN/rivet" bench "$@" --decimals=4 2>/dev/null |
		grep -E '^[0-9]' | tail -1 | awk '{print $2}' | grep . || echo -
}
iters=100000
[ "$where" = rxe ] && iters=2000
for ((r = 0; r < rounds; r++)); do
	progress "rma-ranges: round $((r + 1)) of $rounds"
	order="on off"
	((r % 2)) && order="off on"
	for side in $order; do
		run $side osu_put_latency -m 8:8 -i $iters -x $((iters / 10)) >>"$w/lat.$side"
		run $side osu_put_bw -m 65536:65536 >>"$w/bw.$side"
	done
done
progress_done

echo "# range records on / off, $where, 2 ranks, $rounds rounds; $(nproc) CPUs, kernel $(uname -r)"
echo "| measure | on | off | ratio on/off (median of per-round ratios) | 95% interval |"
echo "|---|---|---|---|---|"
for m in lat bw; do
	name="osu_put_latency 8 B (µs)"
	[ $m = bw ] && name="osu_put_bw 64 KiB (MB/s)"
	echo "| $name | $(median <"$w/$m.on") | $(median <"$w/$m.off") | $(ratios "$w/$m.on" "$w/$m.off" | median | decimals 3) | $(ratios "$w/$m.on" "$w/$m.off" | median_ci) |"
done
