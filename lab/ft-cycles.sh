#!/usr/bin/env bash
# The repeated-failure stress of docs/ft.md: ft's TestCycles (8 ranks, 5
# successive failures, each followed by revoke, agree, shrink and work;
# then finalize) run RUNS times (default 100), each job bounded by
# ft's job timeout; counts passes, failures and hangs.
#
#   bash lab/ft-cycles.sh shm    # on this host, shared memory
#   bash lab/ft-cycles.sh rxe    # over verbs on soft-RoCE, in the VM
set -euo pipefail
cd "$(dirname "$0")/.."
where=${1:-shm}
runs=${RUNS:-100}

if [ "${2:-}" != "--in-vm" ]; then
	out=$(mktemp -d /tmp/rivet-ftcycles.XXXXXX)
	trap 'rm -rf "$out"' EXIT
	CGO_ENABLED=0 go test -c -o "$out/ft.test" ./ft
	if [ "$where" = rxe ]; then
		CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
		exec "$out/rxevm" -q -topology rxe -timeout 80m env BIN="$out" RUNS="$runs" bash "$0" rxe --in-vm
	fi
	BIN=$out
fi
[ "$where" = rxe ] && export RIVET_REQUIRE_RDMA=1
pass=0 fail=0 hang=0
for i in $(seq "$runs"); do
	# A job that hangs is ended by the program's timeout (jobtest), which
	# says so; the outer timeout is a backstop.
	if log=$(timeout 600 "$BIN/ft.test" -test.run '^TestCycles$' -test.count=1 2>&1); then
		pass=$((pass + 1))
	elif grep -q -e 'timed out' -e 'deadline exceeded' -e 'context deadline' <<<"$log"; then
		hang=$((hang + 1))
		echo "run $i: hang"; echo "$log" | tail -20
	else
		fail=$((fail + 1))
		echo "run $i: failed"; echo "$log" | tail -20
	fi
done
echo "# TestCycles, $where: $runs runs: $pass passed, $fail failed, $hang hung"
[ "$fail" = 0 ] && [ "$hang" = 0 ]
