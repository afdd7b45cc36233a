#!/usr/bin/env bash
# Rivet against Rivet: osu_latency (8 B) and osu_bw (1 MiB) built from
# two revisions, in one run, alternating which goes first; prints the
# median of per-round ratios (NEW / OLD) with its 95% interval. For a
# change that must leave the hot paths as they were (a refactor, a move).
# Both builds print 4 decimals (OSU's 2 cannot tell 0.13 µs from 0.14).
#
#   bash lab/ab.sh OLD shm [NEW]   # 2 ranks on this host, shared memory, pinned
#   bash lab/ab.sh OLD rxe [NEW]   # 2 ranks over verbs on soft-RoCE, in the VM
#
# NEW defaults to HEAD (commit what you measure). ROUNDS (default 15)
# rounds; BW=bytes measures osu_bw at that size instead of 1 MiB.
# Latency: a ratio under 1 is faster; bandwidth: over 1 is faster.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bash lab/ab.sh OLD shm|rxe [NEW]}
where=${2:-shm}
new=${3:-HEAD}
rounds=${ROUNDS:-15}

if [ "$new" != "--in-vm" ]; then
	out=$(mktemp -d /tmp/rivet-ab.XXXXXX)
	trap 'git worktree remove --force "$out/src.old" 2>/dev/null; git worktree remove --force "$out/src.new" 2>/dev/null; rm -rf "$out"' EXIT
	for side in new old; do
		r=$new
		[ $side = old ] && r=$rev
		git worktree add -q --detach "$out/src.$side" "$r"
		sed -i 's/fieldWidth, 2, /fieldWidth, 4, /g' "$out/src.$side/bench/osu/osu.go"
		(cd "$out/src.$side" && CGO_ENABLED=0 go build -o "$out/$side/rivet" ./cmd/rivet && CGO_ENABLED=0 go build -o "$out/$side/rivetrun" ./cmd/rivetrun)
	done
	if [ "$where" = rxe ]; then
		CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
		exec "$out/rxevm" -q -topology rxe -timeout 40m env BIN="$out" ROUNDS="$rounds" BW="${BW:-1048576}" bash "$0" "$rev" rxe --in-vm
	fi
	BIN=$out
	rev="$rev → $new"
fi
source lab/stats.sh

w=$(mktemp -d)
run() { # SIDE BENCH ARGS...: the figure of the one row it prints
	local side=$1
	shift
	if [ "$where" = rxe ]; then
		RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=rxe0 timeout 300 "$BIN/$side/rivetrun" -n 2 -bind-to core "$BIN/$side/rivet" bench "$@" 2>/dev/null
	else
		timeout 300 "$BIN/$side/rivetrun" -n 2 -bind-to core "$BIN/$side/rivet" bench "$@" 2>/dev/null
	fi | grep -E '^[0-9]' | tail -1 | awk '{print $2}' | grep . || echo -
}
iters=100000
[ "$where" = rxe ] && iters=5000
abrounds new old "$rounds" $iters

echo "# $rev, $where, 2 ranks, $rounds rounds; $(nproc) CPUs, kernel $(uname -r)"
abtable new old
echo "per round: latency new $(tr '\n' ' ' <"$w/lat.new")| old $(tr '\n' ' ' <"$w/lat.old")"
echo "per round: bandwidth new $(tr '\n' ' ' <"$w/bw.new")| old $(tr '\n' ' ' <"$w/bw.old")"
