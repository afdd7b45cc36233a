//go:build linux

package bootstrap

import (
	"fmt"
	"os"
	"strconv"
)

// startWith is what the error says to use instead.
const startWith = "start the job with mpirun, srun (--mpi=pmix, pmi2 or none), MPICH's mpiexec (Hydra), rivetrun -n N, or torchrun-style variables (docs/bootstrap.md)"

// jobLaunchers are the launchers that may have started this process as
// one of several, by the variable each sets in its processes: the job's
// size where it has one, otherwise any value (a PMIx server's namespace
// names a job whose size only PMIx tells). joinable says whether Detect
// joins such a job: it does over PMIx, which Open MPI's mpirun serves
// beside its own variables.
var jobLaunchers = []struct {
	name, sizeVar, markVar string
	joinable               bool
}{
	{"Open MPI's mpirun", "OMPI_COMM_WORLD_SIZE", "", false},
	{"MVAPICH's mpirun_rsh", "MV2_COMM_WORLD_SIZE", "", false},
	{"a PMIx server (mpirun, prterun, srun --mpi=pmix)", "", "PMIX_NAMESPACE", true},
}

// oneOfSeveral returns the first launcher whose variable says this process
// is one of several, and that variable, or ok false.
func oneOfSeveral(joinable bool) (name, env string, ok bool) {
	for _, l := range jobLaunchers {
		if l.joinable && !joinable {
			continue
		}
		if l.sizeVar != "" {
			v := os.Getenv(l.sizeVar)
			if n, err := strconv.Atoi(v); v != "" && (err != nil || n > 1) {
				return l.name, l.sizeVar + "=" + v, true
			}
			continue
		}
		if v := os.Getenv(l.markVar); v != "" {
			return l.name, l.markVar + "=" + v, true
		}
	}
	return "", "", false
}

// Foreign returns an error wrapping ErrForeignLauncher when the
// environment says that a launcher Rivet cannot join started this process
// as one of several — MVAPICH's mpirun_rsh, or Open MPI's mpirun whose
// PMIx server is not named (no PMIX_NAMESPACE: Detect joins mpirun's jobs
// over PMIx) — and nil otherwise. A size of 1 is not an error: a job of
// one is what Detect makes anyway. Neither is a Slurm step with Rivet's
// own PMI or none: srun gives every process its rank and the step's size,
// whatever --mpi says, and Detect meets over those — but Open MPI's mpirun
// inside an allocation, whose processes inherit its daemons' Slurm
// variables, is foreign. Detect calls it after finding no PMI or PMIx
// server.
func Foreign() error {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" && haveSlurm() {
		return nil
	}
	if name, env, ok := oneOfSeveral(false); ok {
		return fmt.Errorf("%w: %s, %s, and no PMIx server in the environment: %s", ErrForeignLauncher, name, env, startWith)
	}
	return nil
}

// InJob returns an error wrapping ErrInJob when the environment says
// another launcher started this process as one of several (Open MPI's
// mpirun, MVAPICH's mpirun_rsh, any PMIx server), and nil otherwise. A
// command that launches jobs of its own (rivetrun, rivet bench -np) calls
// it before it does: each of the several would launch a job, and the
// launcher's job would run as that many.
func InJob() error {
	if name, env, ok := oneOfSeveral(true); ok {
		return fmt.Errorf("%w: %s started it (%s); run the program under that launcher directly, or launch outside it", ErrInJob, name, env)
	}
	return nil
}
