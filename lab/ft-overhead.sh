#!/usr/bin/env bash
# The failure detector's cost: osu_latency (8 B) and osu_bw (1 MiB) with
# every rank's heartbeat and detector running (rivet bench -detector)
# against neither (RIVET_FT_HEARTBEAT=0), in one run, alternating which
# goes first; prints the median of per-round ratios (on / off) with its
# 95% interval. Both print 4 decimals.
#
#   bash lab/ft-overhead.sh shm    # 2 ranks on this host, shared memory, pinned
#   bash lab/ft-overhead.sh rxe    # 2 ranks over verbs on soft-RoCE, in the VM
#
# ROUNDS (default 15) rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
where=${1:-shm}
rounds=${ROUNDS:-15}

if [ "${2:-}" != "--in-vm" ]; then
	out=$(mktemp -d /tmp/rivet-ftcost.XXXXXX)
	trap 'git worktree remove --force "$out/src" 2>/dev/null; rm -rf "$out"' EXIT
	git worktree add -q --detach "$out/src" HEAD
	sed -i 's/fieldWidth, 2, /fieldWidth, 4, /g' "$out/src/bench/osu/osu.go"
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
	if [ "$side" = on ]; then
		set -- -detector "$@"
	else
		env+=(RIVET_FT_HEARTBEAT=0)
	fi
	timeout 300 "${env[@]}" "$BIN/rivetrun" -n 2 -bind-to core "$BIN/rivet" bench "$@" 2>/dev/null |
		grep -E '^[0-9]' | tail -1 | awk '{print $2}' | grep . || echo -
}
iters=100000
[ "$where" = rxe ] && iters=5000
abrounds on off "$rounds" $iters

echo "# detector and heartbeat on / off, $where, 2 ranks, $rounds rounds; $(nproc) CPUs, kernel $(uname -r)"
abtable on off
