#!/usr/bin/env bash
# The fault-tolerance protocols in internal/ftsim's simulation, at sizes
# no machine here runs: SEEDS failure schedules (default 100000) checked
# against every promise, then the protocols' simulated times against the
# reference allreduce and barrier at 16 to TOP processes (default 65536),
# as a Markdown table and, with OUT, CSVs and a plot.
#
#   bash lab/ftsim.sh                      # 100,000 schedules, curves to 65,536
#   SEEDS=1000000 TOP=4096 bash lab/ftsim.sh
#   OUT=docs/results bash lab/ftsim.sh     # and docs/img/ftsim.svg
#
# A schedule that breaks a promise prints its number: replay it with
# FTSIM_SEEDS=N+1 and a breakpoint, or from internal/ftsim's draw(N).
# Needs Go only; it runs on one CPU: 100,000 schedules take about 7
# minutes, the curves to 65,536 about 3 more.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${SEEDS:-100000}
top=${TOP:-65536}
start=$SECONDS
echo "# $seeds schedules"
FTSIM_SEEDS=$seeds go test -count=1 -timeout 0 -run '^TestSchedules$' -v ./internal/ftsim |
	grep -E '^(--- |\s+ftsim_test|ok|FAIL)'
echo "# curves to $top processes"
out=${OUT:-}
if [ -n "$out" ]; then
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
fi
FTSIM_CURVES=$top FTSIM_OUT=$out go test -count=1 -timeout 0 -run '^TestCurves$' -v ./internal/ftsim |
	grep -E '^\s+(\||curves_test.go:[0-9]+: the model)' | sed -E 's/^\s+//'
if [ -n "$out" ]; then
	go run ./cmd/rivet plot -o docs/img/ftsim.svg -title "agreement, shrink and revoke against allreduce and barrier, simulated" \
		-label agree,shrink,allreduce,revoke,barrier \
		"$out/ftsim-agree.csv" "$out/ftsim-shrink.csv" "$out/ftsim-allreduce.csv" "$out/ftsim-revoke.csv" "$out/ftsim-barrier.csv"
	echo "# docs/img/ftsim.svg"
fi
echo "# $((SECONDS - start)) s"
