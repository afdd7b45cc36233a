#!/usr/bin/env bash
# The failure-detection table of docs/ft.md: rivet bench ft_detect's
# median (ms, over ROUNDS jobs) from a fault to the last survivor knowing,
# per fault and sources, at 2, 4 and 8 ranks.
#
#   bash lab/ft-detect.sh shm    # on this host, shared memory
#   bash lab/ft-detect.sh rxe    # over verbs on soft-RoCE, in the VM
#
# ROUNDS (default 20) jobs per cell; ROWS (e.g. "kill heartbeat") runs one
# row only; NPS (default "2 4 8") the numbers of ranks, the columns.
set -euo pipefail
cd "$(dirname "$0")/.."
where=${1:-shm}
rounds=${ROUNDS:-20}

if [ "${2:-}" != "--in-vm" ]; then
	out=$(mktemp -d /tmp/rivet-ftdetect.XXXXXX)
	trap 'rm -rf "$out"' EXIT
	CGO_ENABLED=0 go build -o "$out/rivet" ./cmd/rivet
	if [ "$where" = rxe ]; then
		CGO_ENABLED=0 go build -o "$out/rxevm" ./cmd/rxevm
		exec "$out/rxevm" -q -topology rxe -timeout 80m env BIN="$out" ROUNDS="$rounds" ROWS="${ROWS:-}" NPS="${NPS:-2 4 8}" bash "$0" rxe --in-vm
	fi
	BIN=$out
fi

rows=("kill all" "kill pidfd" "kill launcher" "kill heartbeat" "stop all")
env=(env RIVET_PROVIDER=shm)
if [ "$where" = rxe ]; then
	rows=("kill all" "kill launcher" "kill heartbeat" "kill completion" "stop all")
	env=(env RIVET_PROVIDER=verbs RIVET_VERBS_DEVICE=rxe0)
fi
[ -n "${ROWS:-}" ] && rows=("$ROWS")
echo "# rivet bench ft_detect, $where, median of $rounds jobs (ms); $(nproc) CPUs, kernel $(uname -r)"
nps=${NPS:-2 4 8}
echo "| fault, sources |$(printf ' %s |' $nps)"
echo "|---|$(printf -- '---|%.0s' $nps)"
for row in "${rows[@]}"; do
	set -- $row
	line="| $1, $2 |"
	for np in $nps; do
		m=$(timeout 1200 "${env[@]}" "$BIN/rivet" bench -np "$np" ft_detect -fault "$1" -sources "$2" -rounds "$rounds" 2>/dev/null |
			grep -E '^[0-9]' | tail -1 | awk '{print $2}' || true)
		line="$line ${m:--} |"
	done
	echo "$line"
done
