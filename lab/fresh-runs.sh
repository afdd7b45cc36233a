#!/usr/bin/env bash
# The README's test command as a new user meets it, again and again: each
# run is a fresh clone of the committed HEAD with empty Go caches (build,
# test and module caches, so every module comes from the proxy again),
# running scripts/test.sh beside a busy process on every CPU and a second
# job of our own tests (`go test ./...` of another clone) at nice 19.
# Stops at the first failure and keeps its log; prints one line a run.
#
#   bash lab/fresh-runs.sh [RUNS]     # default 10
#
# LOAD=0 runs without the busy processes and the second job. Needs what
# scripts/test.sh needs (root, Debian's packages); takes 30–60 minutes a
# run on 2 CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
repo=$(pwd)
out=$(mktemp -d /tmp/rivet-fresh.XXXXXX)
pids=()
second=
secondpg=
# cleanup ends the run's load. Each step may find nothing to end (the
# second job often ends first): none may fail, or set -e would end the
# series itself, silently, after a passing run.
cleanup() {
	if ((${#pids[@]})); then
		kill "${pids[@]}" 2>/dev/null || true
	fi
	# The second job runs in a process group of its own (setsid): its go
	# command, whose command line names no directory, would outlive a
	# kill of the subshell and load the next run too. Its test binaries
	# and ranks run from its directory.
	if [ -n "${secondpg:-}" ]; then
		kill -- -"$secondpg" 2>/dev/null || true
	fi
	if [ -n "${second:-}" ]; then
		pkill -f "$second/" 2>/dev/null || true
	fi
	wait 2>/dev/null || true
}
trap cleanup EXIT

# fresh DIR: a clone of HEAD in DIR with caches of its own, empty.
fresh() {
	git clone -q "$repo" "$1/src"
	mkdir -p "$1/gocache" "$1/gomodcache" "$1/gotmp"
}
# inclone DIR CMD…: CMD in DIR's clone, with DIR's caches.
inclone() {
	local d=$1
	shift
	(cd "$d/src" && GOCACHE=$d/gocache GOMODCACHE=$d/gomodcache GOTMPDIR=$d/gotmp "$@")
}

passed=0
for ((i = 1; i <= runs; i++)); do
	run=$out/run$i
	mkdir -p "$run"
	fresh "$run"
	pids=()
	if [ "${LOAD:-1}" != 0 ]; then
		for ((c = 0; c < $(nproc); c++)); do
			sh -c 'while :; do :; done' &
			pids+=($!)
		done
		second=$out/second$i
		mkdir -p "$second"
		fresh "$second"
		setsid bash -c 'cd "$1/src" && GOCACHE=$1/gocache GOMODCACHE=$1/gomodcache GOTMPDIR=$1/gotmp nice -n 19 go test -count=1 ./... >"$1/log" 2>&1' _ "$second" &
		secondpg=$!
	fi
	t0=$SECONDS
	if inclone "$run" bash scripts/test.sh >"$run/log" 2>&1; then
		passed=$((passed + 1))
		echo "run $i: passed in $((SECONDS - t0)) s"
		cleanup
		pids=()
		chmod -R u+w "$run" "${second:-/nonexistent}" 2>/dev/null || true
		rm -rf "$run" "${second:-}" || true
	else
		echo "run $i: FAILED after $((SECONDS - t0)) s; log: $run/log"
		grep -E '^(--- FAIL|FAIL|panic:|test.sh:)' "$run/log" | head -20
		break
	fi
done
echo "$passed of $runs consecutive runs passed"
((passed == runs))
