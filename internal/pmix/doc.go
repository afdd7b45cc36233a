// Package pmix is a cgo-free client of openpmix servers: Open MPI's
// mpirun, PRRTE's prterun, Slurm's srun --mpi=pmix.
package pmix
