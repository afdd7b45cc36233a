//go:build linux

package pmi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestSpawnWire: a client's spawn request reaches the server's Spawner
// whole — every command, argument (spaces and semicolons too), info key
// and preput key — and the job id comes back; a child job's
// ranks learn their spawner and universe size; PMI-1 has no spawn.
func TestSpawnWire(t *testing.T) {
	srv := NewServer(2, "parent")
	srv.Universe = 6
	want := SpawnRequest{
		Cmds: []SpawnCmd{
			{Path: "/bin/a", Args: []string{"-x", "two words", "semi;colon"}, N: 2, Info: map[string]string{"host": "n1"}},
			{Path: "/bin/b", N: 1},
		},
		Preput: map[string]string{"rivet-spawn": "addr.1:2", "other": "v"},
	}
	var got []SpawnRequest
	srv.Spawn = func(ctx context.Context, rank int, req SpawnRequest) (string, error) {
		got = append(got, req)
		return fmt.Sprintf("child-%d", rank), nil
	}
	errs := job(t, srv, func(c *Client) error {
		ctx := context.Background()
		if c.Spawner() != "" || c.UniverseSize(ctx) != 6 {
			return fmt.Errorf("spawner %q, universe %d", c.Spawner(), c.UniverseSize(ctx))
		}
		if c.Rank() != 0 {
			return nil
		}
		id, err := c.Spawn(ctx, want.Cmds, want.Preput)
		if err != nil || id != "child-0" {
			return fmt.Errorf("spawn: %q, %v", id, err)
		}
		if _, err := c.Spawn(ctx, []SpawnCmd{{Path: "", N: 1}}, nil); !errors.Is(err, ErrProtocol) {
			return fmt.Errorf("spawn of nothing: %v", err)
		}
		if _, err := c.Spawn(ctx, want.Cmds, map[string]string{"k": "a;b"}); err == nil {
			return fmt.Errorf("a preput value PMI cannot carry was sent")
		}
		return c.Finalize(ctx)
	})
	for r, err := range errs {
		if err != nil && !(r == 1 && errors.Is(err, os.ErrClosed)) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if len(got) != 1 || !maps.Equal(got[0].Preput, want.Preput) || len(got[0].Cmds) != 2 {
		t.Fatalf("the server got %+v", got)
	}
	for i, c := range got[0].Cmds {
		w := want.Cmds[i]
		if c.Path != w.Path || c.N != w.N || !slices.Equal(c.Args, w.Args) || !maps.Equal(c.Info, w.Info) {
			t.Errorf("command %d: %+v, want %+v", i, c, w)
		}
	}

	child := NewServer(1, "child-0")
	child.SpawnerJobID = "parent"
	child.Preput("rivet-spawn", "addr.1:2")
	errs = job(t, child, func(c *Client) error {
		ctx := context.Background()
		v, err := c.Get(ctx, "rivet-spawn")
		if c.Spawner() != "parent" || err != nil || v != "addr.1:2" {
			return fmt.Errorf("spawner %q, preput %q, %v", c.Spawner(), v, err)
		}
		if _, err := c.Spawn(ctx, want.Cmds, nil); err == nil || !strings.Contains(err.Error(), "does not spawn") {
			return fmt.Errorf("spawn from a server that does not: %v", err)
		}
		return nil
	})
	if errs[0] != nil {
		t.Error(errs[0])
	}

	v1 := NewServer(1, "v1")
	v1.V1Only = true
	errs = job(t, v1, func(c *Client) error {
		if _, err := c.Spawn(context.Background(), want.Cmds, nil); !errors.Is(err, ErrNoSpawn) {
			return fmt.Errorf("spawn over PMI-1: %v", err)
		}
		return nil
	})
	if errs[0] != nil {
		t.Error(errs[0])
	}
}

const hydraSpawnEnv = "RIVET_PMI_HYDRA_SPAWN"

// TestHydraSpawn: under MPICH's Hydra, rank 0 of two spawns three
// processes of this test binary with a preput key; each child learns
// its spawner, its rank in a job of 3 and the key.
func TestHydraSpawn(t *testing.T) {
	if os.Getenv(hydraSpawnEnv) == "1" {
		hydraSpawnProc(t)
		return
	}
	hydra := testutil.LookTool(t, "mpiexec.hydra", "mpich")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hydra, "-n", "2", os.Args[0], "-test.run=^TestHydraSpawn$", "-test.v")
	cmd.Env = append(os.Environ(), hydraSpawnEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpiexec.hydra: %v\n%s", err, out)
	}
	for r := range 3 {
		if !strings.Contains(string(out), fmt.Sprintf("spawned rank %d of 3 ok", r)) {
			t.Errorf("child %d did not report\n%s", r, out)
		}
	}
}

// hydraSpawnProc is a process of the job Hydra started, or of the one
// its rank 0 spawned (Hydra gives both the same environment).
func hydraSpawnProc(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := FromEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Spawner() != "" {
		hydraSpawnChild(ctx, t, c)
		return
	}
	if c.Rank() == 0 {
		id, err := c.Spawn(ctx, []SpawnCmd{{Path: os.Args[0], Args: []string{"-test.run=^TestHydraSpawn$", "-test.v"}, N: 3}},
			map[string]string{"rivet-test": "hello-world"})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("spawned job %s", id)
	}
	if err := c.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
}

func hydraSpawnChild(ctx context.Context, t *testing.T, c *Client) {
	v, err := c.Get(ctx, "rivet-test")
	if err != nil || v != "hello-world" || c.Spawner() == "" || c.Size() != 3 {
		t.Fatalf("child %d of %d: spawner %q, preput %q, %v", c.Rank(), c.Size(), c.Spawner(), v, err)
	}
	if err := c.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("spawned rank %d of %d ok (spawner %s)\n", c.Rank(), c.Size(), c.Spawner())
}
