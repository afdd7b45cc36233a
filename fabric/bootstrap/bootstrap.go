//go:build linux

// Package bootstrap is how the processes of a job meet before any fabric
// connection exists: each learns its rank and the job's size, publishes
// small values (its addresses) and reads everyone's after a fence. Detect
// finds the launcher the process was started by — PMI-2 or PMI-1 (Hydra,
// srun --mpi=pmi2, rivetrun), PMIx (Open MPI's mpirun, prterun,
// srun --mpi=pmix), a Slurm step without PMI, torchrun-style variables —
// or makes a job of one. See docs/bootstrap.md.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/rivet-hpc/rivet/internal/pmi"
	"github.com/rivet-hpc/rivet/internal/pmix"
)

// Bootstrap is how the processes of a job meet before any fabric
// connection exists: each knows its rank and the job's size, publishes
// values, and after a fence reads everyone's. A Bootstrap that also
// implements JobNamer names the job, and the endpoint's shared-memory
// segments carry that name (so a launcher can remove what a killed job
// left behind).
type Bootstrap interface {
	Rank() int
	Size() int
	// Put publishes value under key for this rank; others see it after
	// the next Fence. Values of any size and content are fine.
	Put(ctx context.Context, key string, value []byte) error
	// Fence is collective: every rank calls it, and after it every rank's
	// earlier puts are visible to Get. It is not a barrier: under Hydra's
	// PMI-2 it returns at once, and a Get waits for the value instead.
	Fence(ctx context.Context) error
	// Get reads what rank put under key before the last Fence.
	Get(ctx context.Context, rank int, key string) ([]byte, error)
	// Launcher names what started the job, for logs: "pmi-2", "pmi-1",
	// "pmix", "slurm", "torchrun", "singleton".
	Launcher() string
	Close() error
}

// Placer is the optional method of a Bootstrap whose launcher says which
// of its nodes runs each rank.
type Placer interface {
	// Nodes returns the launcher's node index of every rank, from 0 — under
	// Slurm, the rank's node in the step. It is valid after the first
	// Fence, and returns an error wrapping ErrNotFound if the launcher does
	// not say, and another error if what it says is malformed.
	Nodes(ctx context.Context) ([]int, error)
}

// Forgetter is the optional method of a Bootstrap that serves the other
// ranks (torchrun-style, rank 0 hosts the store) and waits at Close until
// they are done with it: Forget tells it that rank failed, so Close need
// not wait for a rank whose node died and will never hang up.
type Forgetter interface {
	Forget(rank int)
}

// Detacher is the optional method of a Bootstrap whose launcher ends the
// job when a process it still serves dies: Slurm's PMIx plugin kills the
// step when a client's connection is lost before it finalized. Detach,
// called once every process has read what it needs (fabric.Init reads
// every peer's address first), leaves the launcher, so that a process's
// death later is a fault the others can survive. After Detach only Rank,
// Size, Launcher and Close may be called; Close does nothing more.
type Detacher interface {
	Detach() error
}

// JobNamer is the optional method of a Bootstrap that knows the
// launcher's name for the job (PMI's KVS name).
type JobNamer interface {
	JobID() string
}

// Detect finds the job this process belongs to, in this order:
// PMI-2/PMI-1 over PMI_FD or PMI_PORT (Hydra's mpiexec, srun --mpi=pmi2,
// rivetrun); PMIx over the server PMIX_SERVER_URI* names (Open MPI's
// mpirun, prterun, srun --mpi=pmix); a Slurm step without PMI
// (SLURM_PROCID, SLURM_NTASKS and the step's nodelist: rank 0 hosts the
// store on the first node);
// torchrun-style RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT,
// meeting at a store that rank 0 hosts and that admits only holders of
// RIVET_JOB_SECRET; otherwise a singleton job of size 1. A process that a
// launcher Rivet cannot join started as one of several (MVAPICH's
// mpirun_rsh, Open MPI's mpirun without its PMIx server:
// ErrForeignLauncher) gets an error instead, never a job of its own.
func Detect(ctx context.Context) (Bootstrap, error) {
	c, err := pmi.FromEnv(ctx)
	switch {
	case err == nil:
		if err := checkSlurmPMI(c); err != nil {
			c.Finalize(ctx)
			return nil, err
		}
		return &pmiBootstrap{c: c}, nil
	case !errors.Is(err, pmi.ErrNoLauncher):
		return nil, fmt.Errorf("bootstrap: bootstrap over PMI: %w", err)
	}
	px, err := pmix.FromEnv(ctx)
	switch {
	case err == nil:
		if err := checkSlurmPMIx(px); err != nil {
			px.Finalize(ctx)
			return nil, err
		}
		if isSlurmPMIx(px) {
			return &slurmPMIx{&pmixBootstrap{c: px}}, nil
		}
		return &pmixBootstrap{c: px}, nil
	case !errors.Is(err, pmix.ErrNoServer):
		return nil, fmt.Errorf("bootstrap: bootstrap over PMIx: %w", err)
	}
	if err := Foreign(); err != nil {
		return nil, err
	}
	if haveSlurm() {
		return slurmBootstrap(ctx)
	}
	if os.Getenv("RANK") != "" && os.Getenv("WORLD_SIZE") != "" {
		return torchrunBootstrap(ctx)
	}
	return Singleton(), nil
}

func torchrunBootstrap(ctx context.Context) (Bootstrap, error) {
	rank, err1 := strconv.Atoi(os.Getenv("RANK"))
	size, err2 := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	if err1 != nil || err2 != nil || size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("bootstrap: RANK=%q WORLD_SIZE=%q do not name a rank in a job", os.Getenv("RANK"), os.Getenv("WORLD_SIZE"))
	}
	host, port := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("bootstrap: RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is not")
	}
	secret := os.Getenv("RIVET_JOB_SECRET")
	if secret == "" {
		return nil, fmt.Errorf("%w: set it to the same random value in every process of the job", ErrNoSecret)
	}
	addr := net.JoinHostPort(host, port)
	b, err := joinStore(ctx, addr, addr, rank, size, secret)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// pmiBootstrap namespaces keys by rank and carries values as PMI blobs.
type pmiBootstrap struct{ c *pmi.Client }

func (b *pmiBootstrap) Rank() int { return b.c.Rank() }
func (b *pmiBootstrap) Size() int { return b.c.Size() }
func (b *pmiBootstrap) Launcher() string {
	return "pmi-" + strconv.Itoa(b.c.Version())
}

// JobID is the launcher's name for the job.
func (b *pmiBootstrap) JobID() string { return b.c.JobID() }

func (b *pmiBootstrap) Put(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return b.c.PutBlob(ctx, rankKey(b.Rank(), key), value)
}

func (b *pmiBootstrap) Fence(ctx context.Context) error {
	err := b.c.Fence(ctx)
	if err != nil && ctx.Err() != nil {
		// A rank that died before the fence never arrives, and neither
		// srun's nor Hydra's PMI server says so: only the context ends it.
		return fmt.Errorf("bootstrap: not every rank reached the fence (one that died or never started does not arrive): %w", err)
	}
	return err
}

func (b *pmiBootstrap) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	if err := checkRankKey(rank, b.Size(), key); err != nil {
		return nil, err
	}
	v, err := b.c.GetBlob(ctx, rankKey(rank, key))
	if errors.Is(err, pmi.ErrNotFound) {
		return nil, fmt.Errorf("bootstrap: rank %d put nothing under %q: %w", rank, key, ErrNotFound)
	}
	return v, err
}

// Nodes reads the launcher's PMI_process_mapping. Under srun it also
// checks that the mapping puts this process on its own node.
func (b *pmiBootstrap) Nodes(ctx context.Context) ([]int, error) {
	v, err := b.c.JobAttr(ctx, pmi.MappingKey)
	switch {
	case errors.Is(err, pmi.ErrNotFound) && slurmServesPMI(b.c.JobID()):
		return nil, fmt.Errorf("bootstrap: srun's PMI server gives no %s", pmi.MappingKey)
	case errors.Is(err, pmi.ErrNotFound):
		return nil, fmt.Errorf("bootstrap: the launcher gives no %s: %w", pmi.MappingKey, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	nodes, err := pmi.ParseMapping(v, b.Size())
	if err != nil {
		return nil, fmt.Errorf("bootstrap: from the launcher: %w", err)
	}
	if id, ok := slurmNodeID(); ok && slurmServesPMI(b.c.JobID()) && nodes[b.Rank()] != id {
		return nil, fmt.Errorf("bootstrap: srun's %s %q puts rank %d on node %d, but it runs on node %d (SLURM_NODEID)", pmi.MappingKey, v, b.Rank(), nodes[b.Rank()], id)
	}
	return nodes, nil
}

func (b *pmiBootstrap) Close() error { return b.c.Finalize(context.Background()) }

func rankKey(rank int, key string) string { return "r" + strconv.Itoa(rank) + "-" + key }

func checkKey(key string) error {
	if key == "" || len(key) > 40 || strings.ContainsAny(key, " ;=\n") {
		return fmt.Errorf("bootstrap: bootstrap key %q: 1 to 40 bytes, no spaces, ';' or '='", key)
	}
	return nil
}

func checkRankKey(rank, size int, key string) error {
	if rank < 0 || rank >= size {
		return fmt.Errorf("bootstrap: rank %d is not in a job of %d", rank, size)
	}
	return checkKey(key)
}

// Singleton returns the bootstrap of a job of one process, as Detect
// does when no launcher started this one.
func Singleton() Bootstrap { return &singleton{kv: map[string][]byte{}} }

// singleton is a job of one process.
type singleton struct{ kv map[string][]byte }

func (s *singleton) Rank() int                       { return 0 }
func (s *singleton) Size() int                       { return 1 }
func (s *singleton) Launcher() string                { return "singleton" }
func (s *singleton) Fence(ctx context.Context) error { return ctx.Err() }
func (s *singleton) Close() error                    { return nil }
func (s *singleton) Put(_ context.Context, key string, v []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	s.kv[key] = append([]byte(nil), v...)
	return nil
}

func (s *singleton) Get(_ context.Context, rank int, key string) ([]byte, error) {
	if err := checkRankKey(rank, 1, key); err != nil {
		return nil, err
	}
	v, ok := s.kv[key]
	if !ok {
		return nil, fmt.Errorf("bootstrap: rank 0 put nothing under %q: %w", key, ErrNotFound)
	}
	return v, nil
}
