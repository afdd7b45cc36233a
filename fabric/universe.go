//go:build linux

package fabric

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rivet-hpc/rivet/fabric/bootstrap"
	"github.com/rivet-hpc/rivet/internal/pmi"
)

// The universe: the world ranks of a job and of the jobs its spawns add,
// each after every rank its spawners knew of, all below a size fixed at
// Init (docs/dynamic.md).

// spawnInfo is what a spawn hands its children.
type spawnInfo struct {
	base, universe int
	secret         [16]byte
	addrs          []string // the spawn root's rendezvous
}

func (s *spawnInfo) encode() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %d %x %s", s.base, s.universe, s.secret, strings.Join(s.addrs, ","))
	return hex.EncodeToString(b.Bytes()) // PMI values cannot carry spaces
}

func decodeSpawnInfo(v string) (*spawnInfo, error) {
	raw, err := hex.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("fabric: the spawn's rendezvous %q: %w", v, err)
	}
	f := strings.Fields(string(raw))
	s := &spawnInfo{}
	var e1, e2 error
	if len(f) == 4 {
		s.base, e1 = strconv.Atoi(f[0])
		s.universe, e2 = strconv.Atoi(f[1])
	}
	sec, e3 := hex.DecodeString(f[min(2, len(f)-1)])
	if len(f) != 4 || e1 != nil || e2 != nil || e3 != nil || len(sec) != len(s.secret) || s.base < 1 || s.universe <= s.base {
		return nil, fmt.Errorf("fabric: a malformed spawn rendezvous %q", raw)
	}
	copy(s.secret[:], sec)
	s.addrs = strings.Split(f[3], ",")
	return s, nil
}

// spawnedBy reads how this job was spawned, or nil if a launcher started
// it.
func spawnedBy(ctx context.Context, b bootstrap.Bootstrap) (*spawnInfo, error) {
	sp, ok := b.(bootstrap.Spawner)
	if !ok || sp.SpawnedBy() == "" {
		return nil, nil
	}
	v, err := sp.Preput(ctx, spawnKey)
	if errors.Is(err, bootstrap.ErrNotFound) {
		return nil, nil // spawned, but not by Rivet: a job of its own
	}
	if err != nil {
		return nil, err
	}
	info, err := decodeSpawnInfo(v)
	if err != nil {
		return nil, err
	}
	// The launcher may number the processes itself (rivetrun: from the
	// next rank free, past processes spawned that never joined).
	if v, err := sp.Preput(ctx, pmi.UniverseBaseKey); err == nil {
		if b, err := strconv.Atoi(v); err == nil && b >= info.base {
			info.base = b
		}
	}
	if info.base+b.Size() > info.universe {
		return nil, fmt.Errorf("fabric: a spawn of %d processes from world rank %d overflows a universe of %d", b.Size(), info.base, info.universe)
	}
	return info, nil
}

// UniverseEnv sets the universe's size (WithUniverse).
const UniverseEnv = "RIVET_UNIVERSE_SIZE"

// universeOf is the universe size the launcher gives, 0 if none.
func universeOf(ctx context.Context, b bootstrap.Bootstrap) int {
	if sp, ok := b.(bootstrap.Spawner); ok {
		return sp.UniverseSize(ctx)
	}
	return 0
}

// WithUniverse sets how many processes the job may grow to by spawning,
// its own included (MPI_UNIVERSE_SIZE): every world rank a spawn gives is
// below it, and the shared-memory segments keep a ring for each. The
// largest of it, the launcher's universe size (rivetrun -universe,
// mpiexec -usize) and the job's size wins; RIVET_UNIVERSE_SIZE sets the
// same.
func WithUniverse(n int) Option { return func(o *options) { o.universe = n } }

// offsetBoot is a spawned job's bootstrap as the endpoint uses it: its
// ranks are world ranks, the job's own shifted by base.
type offsetBoot struct {
	bootstrap.Bootstrap
	base int
}

func (b offsetBoot) Rank() int { return b.Bootstrap.Rank() + b.base }
func (b offsetBoot) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	return b.Bootstrap.Get(ctx, rank-b.base, key)
}

// JobID is the launcher's name for the job, if it has one.
func (b offsetBoot) JobID() string {
	if j, ok := b.Bootstrap.(bootstrap.JobNamer); ok {
		return j.JobID()
	}
	return ""
}

// keepBoot is a bootstrap whose Close is left to someone else.
type keepBoot struct{ bootstrap.Bootstrap }

func (keepBoot) Close() error { return nil }

func rankRange(from, n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = from + i
	}
	return r
}

// Joined lists the world ranks this process reaches, itself included, in
// order: its job's, and those of every job a spawn joined to it (or that
// spawned it). A failure detector's ring runs over them.
func (ep *Endpoint) Joined() []int {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	return slices.Clone(ep.e.joined())
}

// UniverseSize is how many world ranks the universe has room for: every
// rank a spawn gives is below it (MPI_UNIVERSE_SIZE).
func (ep *Endpoint) UniverseSize() int { return ep.size }
