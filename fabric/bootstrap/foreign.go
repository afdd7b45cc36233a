//go:build linux

package bootstrap

import (
	"fmt"
	"os"
	"strconv"
)

// startWith is what the error says to use instead.
const startWith = "start the job with rivetrun -n N, MPICH's mpiexec (Hydra), srun --mpi=pmi2 or srun --mpi=none, or torchrun-style variables (docs/bootstrap.md)"

// foreignLaunchers are the launchers Detect recognizes and cannot join,
// by the variable each sets in its processes: the job's size where it has
// one, otherwise any value (a PMIx server's namespace names a job whose
// size only PMIx tells).
var foreignLaunchers = []struct {
	name, sizeVar, markVar string
}{
	{"Open MPI's mpirun (PMIx)", "OMPI_COMM_WORLD_SIZE", ""},
	{"MVAPICH's mpirun_rsh", "MV2_COMM_WORLD_SIZE", ""},
	{"a PMIx launcher (prterun, Open MPI 5's mpirun, Flux)", "", "PMIX_NAMESPACE"},
}

// Foreign returns an error wrapping ErrForeignLauncher when the
// environment says that a launcher Rivet cannot join started this process
// as one of several, and nil otherwise. A size of 1 is not an error: a
// job of one is what Detect makes anyway. Neither is a Slurm step with
// Rivet's own PMI or none: srun gives every process its rank and the
// step's size, whatever --mpi says, and Detect meets over those — but
// Open MPI's mpirun inside an allocation, whose processes inherit its
// daemons' Slurm variables, is foreign. Detect calls it; so does a
// command that launches jobs of its own (rivet bench -np, rivetrun),
// before it does, so that it never runs as N jobs inside another's.
func Foreign() error {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" && haveSlurm() {
		return nil
	}
	for _, l := range foreignLaunchers {
		if l.sizeVar != "" {
			v := os.Getenv(l.sizeVar)
			if n, err := strconv.Atoi(v); v != "" && (err != nil || n > 1) {
				return fmt.Errorf("%w: %s, %s=%s: %s", ErrForeignLauncher, l.name, l.sizeVar, v, startWith)
			}
			continue
		}
		if v := os.Getenv(l.markVar); v != "" {
			return fmt.Errorf("%w: %s, %s=%s: %s", ErrForeignLauncher, l.name, l.markVar, v, startWith)
		}
	}
	return nil
}
