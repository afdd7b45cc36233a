//go:build linux

package bootstrap

import (
	"context"
	"errors"
	"fmt"

	"github.com/rivet-hpc/rivet/internal/pmi"
)

// SpawnCmd is one command of a spawn: N processes of Path with Args (not
// counting the program's name), and info keys for the launcher.
type SpawnCmd = pmi.SpawnCmd

// Spawner is the optional method set of a Bootstrap whose launcher starts
// more processes at a process's request — PMI-2's spawn, which rivetrun,
// Hydra and Slurm's PMI-2 plugin serve.
type Spawner interface {
	// Spawn starts cmds as a new job whose key-value space holds preput
	// (read there with Preput) and returns its id.
	Spawn(ctx context.Context, cmds []SpawnCmd, preput map[string]string) (string, error)
	// SpawnedBy is the id of the job that spawned this one, "" if a
	// launcher started it.
	SpawnedBy() string
	// Preput reads a key the spawning job put in this job's key-value
	// space; the error matches ErrNotFound if it put none.
	Preput(ctx context.Context, key string) (string, error)
	// UniverseSize is how many processes the launcher says the job may
	// grow to, 0 if it does not say.
	UniverseSize(ctx context.Context) int
}

// ErrNoSpawn means the launcher cannot spawn processes (PMI-1, Slurm
// without PMI, torchrun-style variables, a singleton).
var ErrNoSpawn = pmi.ErrNoSpawn

// Spawn implements Spawner. PMI-1 has no spawn (ErrNoSpawn).
func (b *pmiBootstrap) Spawn(ctx context.Context, cmds []SpawnCmd, preput map[string]string) (string, error) {
	id, err := b.c.Spawn(ctx, cmds, preput)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	return id, nil
}

// SpawnedBy implements Spawner.
func (b *pmiBootstrap) SpawnedBy() string { return b.c.Spawner() }

// Preput implements Spawner.
func (b *pmiBootstrap) Preput(ctx context.Context, key string) (string, error) {
	v, err := b.c.Get(ctx, key)
	if errors.Is(err, pmi.ErrNotFound) {
		return "", fmt.Errorf("bootstrap: the spawning job put nothing under %q: %w", key, ErrNotFound)
	}
	return v, err
}

// UniverseSize implements Spawner.
func (b *pmiBootstrap) UniverseSize(ctx context.Context) int { return b.c.UniverseSize(ctx) }
