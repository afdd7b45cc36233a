#!/usr/bin/env bash
# Start-up against the number of processes on this node: the osu_init
# average (ms; fabric.Init, MPI_Init) of one job per launcher and N —
# Rivet under rivetrun, MPICH's Hydra (mpiexec.hydra), Open MPI's mpirun
# (PMIx) and Slurm (srun --mpi=pmi2 and --mpi=pmix, a one-node Slurm of
# 256 CPUs run by lab/slurminit), beside
# Open MPI 4.1 (mpirun, vader) and MPICH 4.0 (Hydra) running OSU's C loop
# (bench/osu/testdata/osu.c). Oversubscribed as need be, unpinned.
#
#   bash lab/init.sh [N …]          # default 8 16 32 64 128 256
#
# From 200 processes Rivet runs under Hydra with RIVET_PMI_VERSION=1
# (docs/bootstrap.md: Hydra 4.0's PMI-2 path hangs there); the column
# says "pmi1" then. A job that does not finish in TIMEOUT seconds (300)
# prints "-". Needs openmpi-bin, libopenmpi-dev, mpich, libmpich-dev and
# Debian's Slurm (slurmctld, slurmd, munge).
set -euo pipefail
cd "$(dirname "$0")/.."
. lab/progress.sh
counts=("$@")
((${#counts[@]})) || counts=(8 16 32 64 128 256)
limit=${TIMEOUT:-300}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

CGO_ENABLED=0 go build -o "$out/rivet" ./cmd/rivet
CGO_ENABLED=0 go build -o "$out/rivetrun" ./cmd/rivetrun
mpicc.openmpi -O2 -o "$out/osu.ompi" bench/osu/testdata/osu.c
# (MPICH's mpi.h draws a -Wstringop-overflow warning from MPI_Waitall.)
mpicc.mpich -O2 -o "$out/osu.mpich" bench/osu/testdata/osu.c 2>"$out/cc.log" || { cat "$out/cc.log" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

# avg CMD…: the osu_init average CMD prints, or "-".
avg() {
	local v
	v=$(timeout -s KILL "$limit" "$@" 2>/dev/null | sed -n 's/.*avg: \([0-9]*\) ms.*/\1/p') || true
	pkill -9 -f "$out/" 2>/dev/null || true
	pkill -9 hydra_pmi_proxy 2>/dev/null || true
	echo "${v:--}"
}

progress "init: Slurm"
slurm=$(cd lab && INIT_SLURM="${counts[*]}" go test -count=1 -v -timeout 60m -run TestInitUnderSlurm ./slurminit |
	sed -n 's/.* \(slurm[a-z]*\) \([0-9]*\) \([0-9]*\)$/\1 \2 \3/p')

printf "%-6s %12s %14s %12s %12s %12s %12s %12s\n" procs rivetrun hydra mpirun slurm slurmpmix ompi mpich
for n in "${counts[@]}"; do
	progress "init: $n processes"
	r=$(avg "$out/rivetrun" -n "$n" -bind-to none "$out/rivet" bench osu_init)
	if ((n >= 200)); then
		h="$(avg mpiexec.hydra -n "$n" -genv RIVET_PMI_VERSION 1 "$out/rivet" bench osu_init) pmi1"
	else
		h=$(avg mpiexec.hydra -n "$n" "$out/rivet" bench osu_init)
	fi
	p=$(avg mpirun.openmpi -n "$n" --oversubscribe --bind-to none "$out/rivet" bench osu_init)
	s=$(awk -v n="$n" '$1 == "slurm" && $2 == n {print $3}' <<<"$slurm")
	sp=$(awk -v n="$n" '$1 == "slurmpmix" && $2 == n {print $3}' <<<"$slurm")
	o=$(avg mpirun.openmpi -n "$n" --oversubscribe --bind-to none "$out/osu.ompi" init)
	m=$(avg mpiexec.hydra -n "$n" "$out/osu.mpich" init)
	printf "%-6d %12s %14s %12s %12s %12s %12s %12s\n" "$n" "$r" "$h" "$p" "${s:--}" "${sp:--}" "$o" "$m"
done
progress_done
