//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/internal/slurmtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/internal/vm"
	"github.com/rivet-hpc/rivet/op"
)

// TestSlurmCluster runs Slurm across three VMs of an rxevm cluster, each
// its own kernel (controller on node1, a slurmd on each), and the tests
// of TestInCluster on node1: srun places ranks on separate kernels, they
// talk over soft-RoCE, and a node that dies under a step is survived.
func TestSlurmCluster(t *testing.T) {
	testutil.RequireCluster(t)
	testutil.RequireRoot(t)
	bin := build(t)
	rxevm := filepath.Join(bin, "rxevm")
	cmd := exec.Command("go", "build", "-o", rxevm, "github.com/rivet-hpc/rivet/cmd/rxevm")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building rxevm: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd = exec.CommandContext(ctx, rxevm, "-topology", "cluster:3", "-timeout", "9m",
		"-node-cmd", slurmtest.NodeEnv+"=1 exec "+self,
		"--", self, "-test.run=^TestInCluster$", "-test.v")
	cmd.Env = append(os.Environ(), inClusterEnv+"="+bin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	t.Logf("node1:\n%s\nstderr:\n%s", out.String(), errb.String())
	if err != nil || !strings.Contains(out.String(), "--- PASS: TestInCluster") {
		t.Fatalf("rxevm: %v", err)
	}
}

// inClusterEnv names, inside the cluster, the directory of the programs
// TestSlurmCluster built.
const inClusterEnv = "RIVET_SLURM_IN_CLUSTER"

// progEnv makes this test binary a rank program.
const progEnv = "RIVET_SLURM_EXAMPLE_PROG"

// TestInCluster is TestSlurmCluster's inside: it runs on node1 of the
// cluster, and only there.
func TestInCluster(t *testing.T) {
	bin := os.Getenv(inClusterEnv)
	if bin == "" {
		t.Skip("runs on node1 of TestSlurmCluster's VMs")
	}
	c := slurmtest.Start(t, slurmtest.Options{Cluster: true})
	srun := func(t *testing.T, args ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		return c.Run(ctx, nil, "srun", append([]string{"--chdir=" + bin, "--mpi=pmi2"}, args...)...)
	}
	t.Run("placement", func(t *testing.T) {
		// One rank per node: three kernels, three of Rivet's nodes, every
		// peer over verbs.
		out, errs, st := srun(t, "-N3", "-n3", "./slurm")
		if st != 0 {
			t.Fatalf("status %d\n%s\n%s", st, out, errs)
		}
		for r := range 3 {
			routes := []string{"verbs", "verbs", "verbs"}
			routes[r] = "self"
			want := fmt.Sprintf("rank %d of 3: slurm node node%d, launch node %d, node %d, routes %s\n", r, r+1, r, r, strings.Join(routes, ","))
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s\n%s", want, out, errs)
			}
		}
	})
	t.Run("osu", func(t *testing.T) {
		out, errs, st := srun(t, "-N2", "-n2", "./rivet", "bench", "osu_latency", "-m", "8:8", "-i", "200", "-x", "20")
		if st != 0 || !strings.Contains(out, "# OSU MPI Latency Test v7.4\n") || !strings.Contains(errs, "rank 1 over verbs") {
			t.Errorf("osu_latency: status %d\n%s\n%s", st, out, errs)
		}
		t.Logf("osu_latency across two kernels:\n%s", out)
	})
	t.Run("respawn", func(t *testing.T) {
		// Task 2 (node3) dies at step 4; Slurm spawns its replacement —
		// a step of its own, sharing the CPUs (SLURM_OVERLAP) — on some
		// node, where it joins its spawners over verbs (and shared memory
		// with one on its own node), and the job ends at full size. The
		// detector's timeout is 2 s: reads across emulated nodes come
		// late.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, errs, st := c.Run(ctx, []string{"FT_EXAMPLE_KILL=2:step4", "RIVET_UNIVERSE_SIZE=8", "SLURM_OVERLAP=1"}, "srun", "--chdir="+bin, "--mpi=pmi2",
			"--no-kill", "--kill-on-bad-exit=0", "-l", "-N3", "-n3", "./ftrespawn", "-timeout", "2s")
		t.Logf("srun status %d\n%s\n%s", st, out, errs)
		sums := regexp.MustCompile(`rank \d of 3 \(world rank (\d)\): checksum (\S+)`).FindAllStringSubmatch(out, -1)
		if len(sums) != 3 || sums[0][2] != sums[1][2] || sums[1][2] != sums[2][2] || !strings.Contains(out, "(world rank 3)") {
			t.Errorf("want 3 processes at full size, world rank 3 the replacement, one checksum")
		}
	})
	t.Run("node death", func(t *testing.T) {
		// The step's last node dies (its qemu killed) once every rank is
		// ready: the survivors learn it from silence alone, shrink and
		// finish; what srun does then is Slurm's. It needs every node:
		// the respawn before killed a task, and a node whose slurmd a
		// loaded host kept from answering for SlurmdTimeout is down
		// until it answers again.
		if err := c.WaitIdle(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		self, _ := os.Executable()
		cmd := c.Command(ctx, []string{progEnv + "=nodedeath"}, "srun", "--mpi=pmi2", "--no-kill", "--kill-on-bad-exit=0", "-l", "-N3", "-n3", self)
		stdout, _ := cmd.StdoutPipe()
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var lines []string
		var killed, known time.Time
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			lines = append(lines, line)
			switch {
			case strings.HasSuffix(line, "every rank ready"):
				if err := vm.Control(ctx, "kill 3"); err != nil {
					t.Error(err)
				}
				killed = time.Now()
			case strings.HasSuffix(line, "every survivor knows"):
				known = time.Now()
			}
		}
		err := cmd.Wait()
		ended := time.Now()
		out := strings.Join(lines, "\n")
		t.Logf("srun: %v; node killed → every survivor knew: %v, → srun ended: %v\n%s\n%s",
			err, known.Sub(killed).Round(time.Millisecond), ended.Sub(killed).Round(time.Millisecond), out, errb.String())
		if killed.IsZero() || known.IsZero() {
			t.Fatal("the node was not killed, or the survivors did not learn it")
		}
		for r := range 2 {
			if want := fmt.Sprintf("%d: rank %d of 2 survivors ok", r, r); !strings.Contains(out, want) {
				t.Errorf("no %q", want)
			}
		}
	})
}

// nodeDeath is the rank program of "node death": the last rank's node is
// killed from outside once rank 0 says every rank is ready.
func nodeDeath() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ep, err := fabric.Init(ctx)
	if err != nil {
		return err
	}
	defer ep.Close()
	// Each node is a TCG VM on a shared machine: a timeout a live node's
	// held vCPU cannot reach (see ft's clusterTimeout).
	d, err := ft.Start(ctx, ep, ft.Options{Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer d.Stop()
	w := ep.World()
	n, me, v := w.Size(), w.Rank(), w.Size()-1
	if err := collectives.Barrier(ctx, w); err != nil {
		return err
	}
	failed := func() error {
		_, err := w.Recv(ctx, nil, v, 96) // never sent
		if !errors.Is(err, fabric.ErrProcFailed) {
			return fmt.Errorf("rank %d: receive from the dead node's rank: %v", me, err)
		}
		return nil
	}
	switch me {
	case v:
		w.Recv(ctx, nil, 0, 96)
		return errors.New("the victim lived on")
	case 0:
		for r := 1; r < v; r++ {
			if _, err := w.Recv(ctx, nil, r, 98); err != nil {
				return err
			}
		}
		fmt.Println("every rank ready")
		if err := failed(); err != nil {
			return err
		}
		for r := 1; r < v; r++ {
			if _, err := w.Recv(ctx, nil, r, 97); err != nil {
				return err
			}
		}
		fmt.Println("every survivor knows")
	default:
		if err := w.Send(ctx, nil, 0, 98); err != nil {
			return err
		}
		if err := failed(); err != nil {
			return err
		}
		if err := w.Send(ctx, nil, 0, 97); err != nil {
			return err
		}
	}
	s, err := ft.Shrink(ctx, w)
	if err != nil {
		return err
	}
	defer s.Free()
	sum := make([]int64, 1)
	if err := collectives.Allreduce(ctx, s, []int64{1}, sum, op.Sum[int64]()); err != nil {
		return err
	}
	if s.Size() != n-1 || sum[0] != int64(n-1) {
		return fmt.Errorf("shrunk to %d, sum %d", s.Size(), sum[0])
	}
	fmt.Printf("rank %d of %d survivors ok\n", s.Rank(), s.Size())
	return nil
}

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(slurmtest.NodeEnv) != "":
		slurmtest.NodeMain()
	case os.Getenv(progEnv) == "nodedeath":
		if err := nodeDeath(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case os.Getenv(progEnv) == "survivors":
		if err := survivors(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
