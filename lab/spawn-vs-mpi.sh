#!/bin/bash
# spawn-vs-mpi.sh [ROUNDS] [NP]: the time of a spawn of 1 and of NP
# processes from NP, under MPICH's Hydra and Debian's Open MPI, beside
# rivet bench ft_respawn's rows on the same machine. Prints each run's
# median (ms).
set -euo pipefail
rounds=${1:-11}
np=${2:-4}
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mpicc.mpich -O2 -o "$tmp/spawn-mpich" spawn.c
mpicc.openmpi -O2 -o "$tmp/spawn-ompi" spawn.c
for k in 1 "$np"; do
	# Debian's MPICH 4.0.2 fails MPI_Comm_spawn here ("Error in spawn
	# call", its ch4 device); Hydra's PMI-2 spawn itself works (rivet's).
	m=$(mpiexec.hydra -n "$np" "$tmp/spawn-mpich" "$rounds" "$k" 2>/dev/null | awk '/^spawn/ {print $3}' | median || true)
	echo "MPICH (Hydra) spawn $k: ${m:-failed} ms"
	o=$(mpirun.openmpi --allow-run-as-root --oversubscribe --host localhost:64 -n "$np" "$tmp/spawn-ompi" "$rounds" "$k" 2>/dev/null | awk '/^spawn/ {print $3}' | median)
	echo "Open MPI $(mpirun.openmpi --version | awk 'NR==1 {print $NF}') spawn $k: $o ms"
done
(cd .. && go run ./cmd/rivet bench -np "$np" ft_respawn -rounds "$rounds")
