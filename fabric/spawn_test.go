//go:build linux

package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric/bootstrap"
	"github.com/rivet-hpc/rivet/internal/heartbeat"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() { progs.Add("spawn", progSpawn) }

// progSpawn: the 2 processes of the job spawn 2 more, as two commands
// (world ranks 2 and 3 of a universe of 4) and talk to them over the intercommunicator, by
// name and from AnySource; both sides merge it, the spawners first, and
// pass a token around the merged ring. Spawning past the universe fails
// everywhere alike, and spawns nothing.
func progSpawn(ctx context.Context, ep *Endpoint) error {
	if p := ep.Parent(); p != nil {
		return spawnedChild(ctx, ep, p)
	}
	w := ep.World()
	self, err := os.Executable()
	must(err, "executable")
	if ep.UniverseSize() != 4 {
		failf("universe %d, want 4", ep.UniverseSize())
	}
	// Commands that cannot be run fail at once, everywhere, with
	// ErrSpawn, and take no world ranks: the spawn below gets 2 and 3.
	// (Under Hydra the spawn of one waited until its context ended.)
	for _, cmd := range []string{"/nonexistent/rivet-program", "/etc"} {
		_, err := w.Spawn(ctx, 0, cmd, nil, 1)
		if !errors.Is(err, ErrSpawn) {
			failf("spawn of %s: %v, want ErrSpawn", cmd, err)
		}
	}
	// Two commands of one process each (the same program): one job of 2.
	ic, err := w.SpawnMultiple(ctx, 0, []SpawnCmd{{Path: self, Args: []string{"-test.run=^$"}, N: 1}, {Path: self, Args: []string{"-test.run=^$", "-test.v"}, N: 1}})
	must(err, "spawn")
	if !ic.IsInter() || ic.Size() != 2 || !slices.Equal(ic.RemoteGroup().Members(), []int{2, 3}) || !ic.LocalFirst() {
		failf("spawned: size %d, remote %v, local first %v", ic.Size(), ic.RemoteGroup().Members(), ic.LocalFirst())
	}
	for _, p := range []int{2, 3} {
		if got := ep.Provider(p); got != "shm" && got != "verbs" {
			failf("world rank %d is reached by %q", p, got)
		}
	}
	knowsKernel(ep, 2, 3)
	crossTalk(ctx, ic, w.Rank())
	m, err := ic.Merge(ctx, false)
	must(err, "merge")
	ring(ctx, m, []int{0, 1, 2, 3})
	must(m.Free(), "free the merged communicator")
	// The universe is full: the root refuses, and the others hear it.
	if _, err := w.Spawn(ctx, 1, self, nil, 1); err == nil || w.Rank() == 1 && !errors.Is(err, ErrNotSupported) {
		failf("a spawn past the universe: %v", err)
	}
	return ic.Free()
}

// spawnedChild is a spawned process's side of progSpawn.
func spawnedChild(ctx context.Context, ep *Endpoint, p *Comm) error {
	w := ep.World()
	if w.Size() != 2 || !slices.Equal(w.Group().Members(), []int{2, 3}) || ep.UniverseSize() != 4 {
		failf("spawned world %v, universe %d", w.Group().Members(), ep.UniverseSize())
	}
	if !p.IsInter() || p.Size() != 2 || p.LocalFirst() || !slices.Equal(p.RemoteGroup().Members(), []int{0, 1}) {
		failf("parent: size %d, remote %v, local first %v", p.Size(), p.RemoteGroup().Members(), p.LocalFirst())
	}
	knowsKernel(ep, 0, 1)
	crossTalk(ctx, p, w.Group().Members()[w.Rank()])
	m, err := p.Merge(ctx, true)
	must(err, "merge")
	ring(ctx, m, []int{0, 1, 2, 3})
	return m.Free()
}

// knowsKernel checks that this process can ask the kernel about the
// heartbeat threads of world ranks ws, which a spawn joined on this node:
// a detector judges a process here by the kernel's word, not by how late
// its reads come back (which convicted live processes under emulation).
func knowsKernel(ep *Endpoint, ws ...int) {
	if !heartbeat.Independent {
		return
	}
	for _, w := range ws {
		if rs := ep.HeartbeatRunstate(w); rs == RunUnknown || rs == RunGone {
			failf("the kernel's word on world rank %d's heartbeat: %v", w, rs)
		}
	}
}

// crossTalk: every process sends its world rank to every remote rank and
// receives from each by name, then sends to remote rank 0, which takes
// them from AnySource.
func crossTalk(ctx context.Context, ic *Comm, me int) {
	theirs := ic.RemoteGroup().Members()
	var buf [8]byte
	for r := range ic.RemoteSize() {
		binary.LittleEndian.PutUint64(buf[:], uint64(me))
		must(ic.Send(ctx, buf[:], r, 1), "send across")
	}
	for r := range ic.RemoteSize() {
		st, err := ic.Recv(ctx, buf[:], r, 1)
		must(err, "receive across")
		if got := int(binary.LittleEndian.Uint64(buf[:])); got != theirs[r] || st.Source != r {
			failf("from remote rank %d: %d, source %d", r, got, st.Source)
		}
	}
	binary.LittleEndian.PutUint64(buf[:], uint64(me))
	must(ic.Send(ctx, buf[:], 0, 2), "send to remote rank 0")
	if ic.Rank() == 0 {
		for range ic.RemoteSize() {
			st, err := ic.Recv(ctx, buf[:], AnySource, 2)
			must(err, "receive from any source")
			if got := int(binary.LittleEndian.Uint64(buf[:])); theirs[st.Source] != got {
				failf("any source: %d from source %d", got, st.Source)
			}
		}
	}
}

// ring checks m's members and passes a token around it.
func ring(ctx context.Context, m *Comm, want []int) {
	if !slices.Equal(m.Group().Members(), want) {
		failf("merged %v, want %v", m.Group().Members(), want)
	}
	n, r := m.Size(), m.Rank()
	got := make([]byte, 1)
	_, err := m.Sendrecv(ctx, []byte{byte(r)}, (r+1)%n, 3, got, (r+n-1)%n, 3)
	must(err, "ring")
	if int(got[0]) != (r+n-1)%n {
		failf("ring: %d from %d", got[0], (r+n-1)%n)
	}
}

// TestSpawn runs progSpawn under rivetrun's engine, over shared memory on
// the host and verbs in the VM: the two spawned processes finish too.
func TestSpawn(t *testing.T) {
	for _, way := range []string{"shm", "verbs"} {
		t.Run(way, func(t *testing.T) {
			env := append(providerEnv(t, way), UniverseEnv+"=4")
			out, errs, st := runJob(t, 2, "spawn", false, env...)
			if st != 0 {
				t.Fatalf("status %d\n%s\n%s", st, out, errs)
			}
			for _, want := range []string{"[0] rank 0 ok", "[1] rank 1 ok", "[2] rank 0 ok", "[3] rank 1 ok"} {
				if !strings.Contains(out, want) {
					t.Fatalf("%q missing\n%s\n%s", want, out, errs)
				}
			}
			t.Log(strings.TrimSpace(fmt.Sprint(errs)))
		})
	}
}

func init() {
	progs.Add("spawnfail", progSpawnFail)
	progs.BeforeInit("spawnfail", func() {
		// A spawned child told to die does so before it joins.
		if os.Getenv("FT_SPAWN_KILL") == "child" && strings.Contains(os.Getenv("PMI_JOBID"), "-spawn") && os.Getenv("PMI_RANK") == "1" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	})
}

// progSpawnFail: 3 processes spawn 2 from root 1, with a failure
// FT_SPAWN_KILL names: the root dies once the children are started
// ("spawned") or once the members have their records ("committing"), or
// a child dies before it joins ("child"). Nobody hangs: every surviving
// spawner returns — with an error where it must (the root gone: those
// still waiting for it; a child gone: all) — and the children end.
func progSpawnFail(ctx context.Context, ep *Endpoint) error {
	if ep.Parent() != nil {
		// A child that joined although its root died before its last
		// word would be a bug.
		failf("joined the spawners, which should have failed")
	}
	w := ep.World()
	self, err := os.Executable()
	must(err, "executable")
	kill := func() { syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
	switch how := os.Getenv("FT_SPAWN_KILL"); {
	case how == "spawned" && w.Rank() == 1:
		testHookSpawned = kill
	case how == "committing" && w.Rank() == 1:
		testHookSpawnRoot = kill
	}
	ic, err := w.Spawn(ctx, 1, self, []string{"-test.run=^$"}, 2)
	fmt.Printf("spawn: %v\n", err)
	if err == nil {
		// Succeeded here (the root died after this member had the
		// records): the children are gone, and a receive from one ends.
		_, rerr := ic.Recv(ctx, make([]byte, 1), 0, 9)
		fmt.Printf("receive from a child: %v\n", rerr)
		if rerr == nil {
			failf("a receive from a child that left succeeded")
		}
		must(ic.Free(), "free")
	} else if os.Getenv("FT_SPAWN_KILL") == "child" && (!errors.Is(err, ErrSpawn) || !strings.Contains(err.Error(), "children could not start") &&
		!strings.Contains(err.Error(), "a child failed before it joined") && !strings.Contains(err.Error(), "spawn failed at its root")) {
		failf("spawn with a child dead before it joined: %v", err)
	}
	return nil
}

// TestSpawnFailures: a failure during a spawn — its root's, before the
// children dial in or after the members have their records, or a
// child's before it joins — ends the spawn at every survivor and every
// child, with an error where MPI 4.1 §16.2.4 asks for one.
func TestSpawnFailures(t *testing.T) {
	for _, how := range []string{"spawned", "committing", "child"} {
		t.Run(how, func(t *testing.T) {
			out, errs, _ := runJob(t, 3, "spawnfail", true, "RIVET_PROVIDER=shm", UniverseEnv+"=5", "FT_SPAWN_KILL="+how)
			survivors := []int{0, 2}
			if how == "child" {
				survivors = []int{0, 1, 2}
			}
			for _, r := range survivors {
				if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
					t.Fatalf("spawner %d did not finish\n%s\n%s", r, out, errs)
				}
			}
			if how == "child" && strings.Count(out, "spawn: fabric:") != 3 {
				t.Fatalf("every spawner must raise\n%s\n%s", out, errs)
			}
			if strings.Contains(out, "[3] rank") || strings.Contains(out, "[4] rank") {
				t.Fatalf("a child finished\n%s\n%s", out, errs)
			}
		})
	}
}

// TestHostSpawnHydra runs progSpawn under MPICH's Hydra, whose PMI-2 spawn
// starts the children: every process of both jobs finishes.
func TestHostSpawnHydra(t *testing.T) {
	hydra := testutil.LookTool(t, "mpiexec.hydra", "mpich")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// -usize gives the universe (MPICH 4.0's Hydra answers it only to
	// PMI-1's get_universe_size).
	cmd := exec.CommandContext(ctx, hydra, "-usize", "4", "-n", "2", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), progEnv+"=spawn", "RIVET_PROVIDER=shm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpiexec.hydra: %v\n%s", err, out)
	}
	for _, want := range []string{"rank 0 ok", "rank 1 ok"} {
		if n := strings.Count(string(out), want); n != 2 {
			t.Fatalf("%q %d times, want 2 (a spawner and a child)\n%s", want, n, out)
		}
	}
}

// TestHostSpawnMpirun: the spawn test's program under Open MPI's mpirun,
// whose PMIx server starts the children as a job of their own
// (PMIx_Spawn); the universe comes from RIVET_UNIVERSE_SIZE, mpirun's
// being its slots.
func TestHostSpawnMpirun(t *testing.T) {
	mpirun := testutil.LookTool(t, "mpirun.openmpi", "openmpi-bin")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "-n", "2", "--oversubscribe", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), progEnv+"=spawn", "RIVET_PROVIDER=shm", UniverseEnv+"=4",
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	for _, want := range []string{"rank 0 ok", "rank 1 ok"} {
		if n := strings.Count(string(out), want); n != 2 {
			t.Fatalf("%q %d times, want 2 (a spawner and a child)\n%s", want, n, out)
		}
	}
}

// TestSpawnUnsupported: a launcher that cannot spawn (here a singleton)
// makes Spawn fail with ErrNotSupported, and bad arguments are refused.
func TestSpawnUnsupported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, err := InitWith(ctx, bootstrap.Singleton(), WithUniverse(3), WithHeartbeat(0))
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	w := ep.World()
	if ep.UniverseSize() != 3 || ep.Parent() != nil {
		t.Fatalf("universe %d, parent %v", ep.UniverseSize(), ep.Parent())
	}
	if _, err := w.Spawn(ctx, 0, "/bin/true", nil, 1); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "singleton") {
		t.Errorf("spawn under a singleton: %v", err)
	}
	for _, c := range []struct {
		root int
		cmds []SpawnCmd
	}{{1, []SpawnCmd{{Path: "/bin/true", N: 1}}}, {0, []SpawnCmd{{Path: "/bin/true", N: 0}}}, {0, []SpawnCmd{{Path: "", N: 1}}}} {
		if _, err := w.SpawnMultiple(ctx, c.root, c.cmds); !errors.Is(err, ErrInvalid) {
			t.Errorf("spawn from root %d of %v: %v", c.root, c.cmds, err)
		}
	}
}
