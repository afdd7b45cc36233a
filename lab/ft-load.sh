#!/usr/bin/env bash
# The failure detector on a loaded machine: a long soak with every rank's
# detector running, then SIGKILL and SIGSTOP detection times, all inside a
# cgroup CPU quota (cgroup v2 cpu.max, or v1's cfs quota) with a busy
# process of the same priority on every CPU — the conditions of a shared,
# throttled node. Counts false positives (target 0) and prints
# ft_detect's medians under the same load. Needs root (the cgroup).
#
#   bash lab/ft-load.sh [MINUTES]     # default 10 minutes of soak
#
# QUOTA_MS/PERIOD_MS (default 50/500: the job runs 10% of each period on
# the whole machine, throttled for some 450 ms at a time); NP ranks
# (default 4: 2× oversubscribed on 2 CPUs); ROUNDS ft_detect jobs per
# fault (default 20). REV=<git revision> measures that revision instead.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
quota=${QUOTA_MS:-50} period=${PERIOD_MS:-500} np=${NP:-4} rounds=${ROUNDS:-20}

out=$(mktemp -d /tmp/rivet-ftload.XXXXXX)
hogs=()
cg=
cleanup() {
	((${#hogs[@]})) && kill "${hogs[@]}" 2>/dev/null
	wait 2>/dev/null || true
	[ -n "$cg" ] && rmdir "$cg" 2>/dev/null
	rm -rf "$out"
}
trap cleanup EXIT
if [ -n "${REV:-}" ]; then
	git worktree add -q --detach "$out/src" "$REV"
	(cd "$out/src" && CGO_ENABLED=0 go build -o "$out/rivet" ./cmd/rivet)
	git worktree remove --force "$out/src"
else
	CGO_ENABLED=0 go build -o "$out/rivet" ./cmd/rivet
fi

# The cpu controller: a v1 hierarchy that has it, else the v2 one.
root=$(findmnt -rn -t cgroup -o TARGET,OPTIONS | awk '$2 ~ /(^|,)cpu(,|$)/ {print $1; exit}')
if [ -n "$root" ]; then
	cg=$(mktemp -d "$root/rivet-ftload.XXXXXX")
	echo $((period * 1000)) >"$cg/cpu.cfs_period_us"
	echo $((quota * 1000)) >"$cg/cpu.cfs_quota_us"
else
	root=$(findmnt -rn -t cgroup2 -o TARGET | head -1)
	[ -n "$root" ] && grep -qw cpu "$root/cgroup.controllers" || {
		echo "ft-load.sh: no cgroup cpu controller" >&2
		exit 1
	}
	echo +cpu >"$root/cgroup.subtree_control"
	cg=$(mktemp -d "$root/rivet-ftload.XXXXXX")
	echo "$((quota * 1000)) $((period * 1000))" >"$cg/cpu.max"
fi
for ((c = 0; c < $(nproc); c++)); do
	taskset -c "$c" sh -c 'while :; do :; done' &
	hogs+=($!)
done

# In the quota: the shell that starts each job joins the group first.
inq() { sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$cg" "$@"; }

echo "# rivet ft-load: $np ranks, quota ${quota} ms per ${period} ms, one busy process per CPU; $(nproc) CPUs, kernel $(uname -r)"
jobs=0 fails=0
end=$((SECONDS + minutes * 60))
while ((SECONDS < end)); do
	jobs=$((jobs + 1))
	if ! inq "$out/rivet" bench -np "$np" -detector osu_allreduce -m 8:1024 -i 2000 >"$out/soak.log" 2>&1; then
		fails=$((fails + 1))
		echo "soak job $jobs failed:" >&2
		grep -E 'suspected|declared|status' "$out/soak.log" | head -5 >&2
	fi
done
echo "soak: $jobs jobs of osu_allreduce with every detector running, $minutes min, $fails failed (each a false positive: nothing was killed)"
for fault in kill stop; do
	if inq "$out/rivet" bench -np "$np" ft_detect -rounds "$rounds" -fault "$fault" -sources heartbeat >"$out/detect.log" 2>"$out/detect.err"; then
		tail -1 "$out/detect.log" | awk -v f="$fault" '{printf "%s, heartbeat only: median %s ms, min %s, max %s\n", f, $2, $3, $4}'
	else
		echo "$fault, heartbeat only: failed: $(grep -v '^rivetrun' "$out/detect.err" | tail -1)"
	fi
done
