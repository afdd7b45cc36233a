//go:build linux

package bootstrap

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/rivet-hpc/rivet/internal/pmix"
)

// finalizeWait bounds Close's wait for the server's acknowledgement: a
// live server answers at once, a dead one hangs up, and only a server
// that is stuck makes Close wait this long before it hangs up itself.
const finalizeWait = 30 * time.Second

// pmixBootstrap meets over the job's PMIx server (Open MPI's mpirun,
// PRRTE, srun --mpi=pmix): puts are staged and committed at the fence,
// which collects every process's data at the server.
type pmixBootstrap struct {
	c *pmix.Client

	mu     sync.Mutex
	closed bool
}

func (b *pmixBootstrap) Rank() int        { return b.c.Rank() }
func (b *pmixBootstrap) Size() int        { return b.c.Size() }
func (b *pmixBootstrap) Launcher() string { return "pmix" }

// JobID is the server's namespace of the job.
func (b *pmixBootstrap) JobID() string { return b.c.Nspace() }

func (b *pmixBootstrap) Put(_ context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	b.c.Put(rankKey(b.Rank(), key), value)
	return nil
}

func (b *pmixBootstrap) Fence(ctx context.Context) error {
	if err := b.c.Commit(ctx); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := b.c.Fence(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("bootstrap: not every rank reached the fence (one that died or never started does not arrive): %w", err)
		}
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

func (b *pmixBootstrap) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	if err := checkRankKey(rank, b.Size(), key); err != nil {
		return nil, err
	}
	v, err := b.c.Get(ctx, rank, rankKey(rank, key))
	switch {
	case errors.Is(err, pmix.ErrNotFound):
		return nil, fmt.Errorf("bootstrap: rank %d put nothing under %q: %w", rank, key, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return v, nil
}

// Nodes reads each rank's node from the job data the server sent at
// connect (PMIx's per-process node id).
func (b *pmixBootstrap) Nodes(context.Context) ([]int, error) {
	nodes := make([]int, b.Size())
	for r := range nodes {
		v, ok := b.c.Proc(r, pmix.KeyNodeID)
		if !ok {
			return nil, fmt.Errorf("bootstrap: the PMIx server gives no %s for rank %d: %w", pmix.KeyNodeID, r, ErrNotFound)
		}
		id, ok := v.Uint()
		if !ok || id > 1<<31 {
			return nil, fmt.Errorf("bootstrap: the PMIx server's %s for rank %d is %+v", pmix.KeyNodeID, r, v)
		}
		nodes[r] = int(id)
	}
	return nodes, nil
}

// Close finalizes, so that the server counts the process as ended well.
func (b *pmixBootstrap) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), finalizeWait)
	defer cancel()
	if err := b.c.Finalize(ctx); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// slurmPMIx is srun --mpi=pmix's server. Slurm's PMIx plugin kills the
// step when a client's connection is lost before it finalized (its error
// handler: "Error handler invoked: status = -61", then "STEP … CANCELLED"
// about a second later, every survivor killed), so it is a Detacher:
// Init finalizes once it has read what it needs, and a process that dies
// afterwards is a fault the others survive, as under srun --mpi=pmi2.
// Slurm 22.05's plugin serves no spawn, and neither does this.
type slurmPMIx struct{ b *pmixBootstrap }

func (s *slurmPMIx) Rank() int        { return s.b.Rank() }
func (s *slurmPMIx) Size() int        { return s.b.Size() }
func (s *slurmPMIx) Launcher() string { return s.b.Launcher() }
func (s *slurmPMIx) JobID() string    { return s.b.JobID() }
func (s *slurmPMIx) Put(ctx context.Context, key string, value []byte) error {
	return s.b.Put(ctx, key, value)
}
func (s *slurmPMIx) Fence(ctx context.Context) error { return s.b.Fence(ctx) }
func (s *slurmPMIx) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	return s.b.Get(ctx, rank, key)
}
func (s *slurmPMIx) Nodes(ctx context.Context) ([]int, error) { return s.b.Nodes(ctx) }

// Detach implements Detacher: it finalizes.
func (s *slurmPMIx) Detach() error { return s.b.Close() }

// Close finalizes, unless Detach did.
func (s *slurmPMIx) Close() error { return s.b.Close() }

// A PMIx spawn has no key-value space the spawner can write before its
// children start, so the spawner hands them its namespace and the preput
// keys in their environment.
const (
	pmixSpawnedByEnv = "RIVET_PMIX_SPAWNED_BY"
	pmixPreputEnv    = "RIVET_PMIX_PREPUT" // base64url of a JSON object
)

// Spawn implements Spawner: PMIx_Spawn of one application a command. The
// MPI info keys "wdir" and "host" become the application's working
// directory and pmix.host; other keys are passed to the server as they
// are, as strings.
func (b *pmixBootstrap) Spawn(ctx context.Context, cmds []SpawnCmd, preput map[string]string) (string, error) {
	pp, err := json.Marshal(preput)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	env := []string{pmixSpawnedByEnv + "=" + b.c.Nspace(), pmixPreputEnv + "=" + base64.RawURLEncoding.EncodeToString(pp)}
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("bootstrap: spawn: %w", err)
	}
	apps := make([]pmix.App, len(cmds))
	for i, c := range cmds {
		a := pmix.App{Cmd: c.Path, Argv: append([]string{filepath.Base(c.Path)}, c.Args...), Env: env, Cwd: cwd, MaxProcs: c.N}
		for _, k := range slices.Sorted(maps.Keys(c.Info)) {
			switch v := c.Info[k]; k {
			case "wdir":
				a.Cwd = v
			case "host":
				a.Info = append(a.Info, pmix.Info{Key: "pmix.host", Value: pmix.Value{Type: pmix.String, V: v}})
			default:
				a.Info = append(a.Info, pmix.Info{Key: k, Value: pmix.Value{Type: pmix.String, V: v}})
			}
		}
		apps[i] = a
	}
	ns, err := b.c.Spawn(ctx, nil, apps)
	var se *pmix.StatusError
	switch {
	case errors.As(err, &se) && se.Status == pmix.StatusNotSupported:
		// Slurm 22.05's PMIx plugin, for one, serves no spawn.
		return "", fmt.Errorf("%w: %w", ErrNoSpawn, err)
	case err != nil:
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	return ns, nil
}

// SpawnedBy implements Spawner: the spawner's namespace, from the
// environment its spawn gave.
func (b *pmixBootstrap) SpawnedBy() string { return os.Getenv(pmixSpawnedByEnv) }

// Preput implements Spawner, reading the keys the spawner passed in the
// environment.
func (b *pmixBootstrap) Preput(_ context.Context, key string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(os.Getenv(pmixPreputEnv))
	var pp map[string]string
	if err == nil && len(raw) > 0 {
		err = json.Unmarshal(raw, &pp)
	}
	if err != nil {
		return "", fmt.Errorf("bootstrap: %s is malformed: %w", pmixPreputEnv, err)
	}
	v, ok := pp[key]
	if !ok {
		return "", fmt.Errorf("bootstrap: the spawning job put nothing under %q: %w", key, ErrNotFound)
	}
	return v, nil
}

// UniverseSize implements Spawner: the server's pmix.univ.size.
func (b *pmixBootstrap) UniverseSize(context.Context) int { return b.c.UniverseSize() }
