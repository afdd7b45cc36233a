//go:build linux

package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/pmi"
)

// spawnEnv makes this test binary a process of a job TestSpawn runs.
const spawnEnv = "RIVET_LAUNCH_SPAWN"

// spawnProc: rank 0 of the launched job spawns two processes (ranks 2
// and 3 of the universe) with a preput key, then a third, failing one;
// the spawned ones say who they are and exit with what RIVET_LAUNCH_SPAWN
// tells them.
func spawnProc() int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pmi.FromEnv(ctx)
	if err != nil {
		fmt.Println("pmi:", err)
		return 1
	}
	if c.Spawner() != "" {
		v, err := c.Get(ctx, "greeting")
		fmt.Printf("spawned rank %d of %d by %s: %q %v\n", c.Rank(), c.Size(), c.Spawner(), v, err)
		c.Finalize(ctx)
		st, _ := strconv.Atoi(os.Getenv(spawnEnv + "_STATUS"))
		return st
	}
	if c.Rank() == 0 {
		self, _ := os.Executable()
		id, err := c.Spawn(ctx, []pmi.SpawnCmd{{Path: self, N: 2}}, map[string]string{"greeting": "hello", SpawnBaseKey: "2"})
		fmt.Printf("spawn: %s %v\n", id, err)
		_, err = c.Spawn(ctx, []pmi.SpawnCmd{{Path: self, N: 1}}, map[string]string{SpawnBaseKey: "9"})
		fmt.Printf("spawn past the next free rank: %v\n", err)
		_, err = c.Spawn(ctx, []pmi.SpawnCmd{{Path: "/nonexistent/program", N: 1}}, nil)
		fmt.Printf("spawn of nothing: %v\n", err)
		// A file that is executable but no program: it passes the
		// launcher's look-up, and exec fails (ENOEXEC).
		bad := os.Getenv(spawnEnv + "_BAD")
		_, err = c.Spawn(ctx, []pmi.SpawnCmd{{Path: bad, N: 1}}, nil)
		fmt.Printf("spawn of no program: %v\n", err)
	}
	c.Fence(ctx)
	c.Finalize(ctx)
	return 0
}

// TestSpawn: a process spawns two more under the launcher; they start as
// a job of their own with the preput key, numbered 2 and 3 in the output
// tags, and the job waits for them; a spawn whose ranks would not be the
// next free ones, or of a program that does not exist, fails with an
// error and starts nothing; a spawned process that fails fails the job.
func TestSpawn(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "noprogram")
	if err := os.WriteFile(bad, []byte{0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, status := range []int{0, 3} {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		// Under -ft -expect-failures: a spawned process that never
		// started is no survivor, nor a failure (rivetrun exited 127).
		st := Run(ctx, Options{N: 2, Tag: true, Universe: 5, FT: status == 0, ExpectFailures: status == 0, Stdout: &out, Stderr: &errb,
			Env: []string{spawnEnv + "=1", spawnEnv + "_STATUS=" + strconv.Itoa(status), spawnEnv + "_BAD=" + bad}}, []string{self})
		cancel()
		if st != status {
			t.Errorf("status %d, want %d\n%s\n%s", st, status, out.String(), errb.String())
		}
		if status != 0 {
			// The first spawned process to fail stops the job (no -ft).
			if !strings.Contains(errb.String(), "exited with status 3; stopping the other ranks") {
				t.Errorf("stderr:\n%s", errb.String())
			}
			continue
		}
		for _, want := range []string{
			"[2] spawned rank 0 of 2 by rivet-", "[3] spawned rank 1 of 2 by rivet-", `"hello" <nil>`,
			"[0] spawn: rivet-", "-spawn1 <nil>",
			"[0] spawn past the next free rank: pmi: spawn: pmi: spawn-response failed: rc=1 rivetrun: spawn: the spawned processes would be ranks 9 on, but the next free rank is 4",
			"[0] spawn of nothing: pmi: spawn: pmi: spawn-response failed: rc=1 rivetrun: spawn: exec",
			"[0] spawn of no program: pmi: spawn: pmi: spawn-response failed: rc=1 rivetrun: spawn: a process could not start (status 127)",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s\n%s", want, out.String(), errb.String())
			}
		}
		if strings.Contains(out.String(), "[4]") || strings.Contains(out.String(), "[5]") {
			t.Errorf("a failed spawn started a process:\n%s", out.String())
		}
	}
}
