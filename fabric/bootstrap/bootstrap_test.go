//go:build linux

package bootstrap_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/fabric/bootstrap"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// childEnv makes the test binary run bootstrapChild instead of the tests:
// the same program under every launcher.
const childEnv = "RIVET_FABRIC_BOOTSTRAP_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := bootstrapChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// bootstrapChild publishes a large endpoint blob, fences, and checks every
// other rank's.
func bootstrapChild() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := bootstrap.Detect(ctx)
	if err != nil {
		return err
	}
	ep := func(r int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("ep%d;=\x00", r)), 500) }
	if err := b.Put(ctx, "ep", ep(b.Rank())); err != nil {
		return err
	}
	if err := b.Fence(ctx); err != nil {
		return err
	}
	for r := 0; r < b.Size(); r++ {
		v, err := b.Get(ctx, r, "ep")
		if err != nil {
			return err
		}
		if !bytes.Equal(v, ep(r)) {
			return fmt.Errorf("rank %d's endpoint came back wrong (%d bytes)", r, len(v))
		}
	}
	// The same program then talks: a ring of messages around the world.
	e, err := fabric.InitWith(ctx, b)
	if err != nil {
		return err
	}
	defer e.Close()
	w := e.World()
	n, r := w.Size(), w.Rank()
	buf := make([]byte, 64)
	st, err := w.Sendrecv(ctx, []byte(fmt.Sprintf("from %d", r)), (r+1)%n, 1, buf, (r+n-1)%n, 1)
	if err != nil {
		return err
	}
	if got, want := string(buf[:st.Count]), fmt.Sprintf("from %d", (r+n-1)%n); got != want {
		return fmt.Errorf("ring: got %q, want %q", got, want)
	}
	fmt.Printf("bootstrap rank %d of %d via %s ok\n", b.Rank(), b.Size(), b.Launcher())
	return nil
}

func checkRanks(t *testing.T, out string, size int, launcher string) {
	t.Helper()
	for r := 0; r < size; r++ {
		want := fmt.Sprintf("bootstrap rank %d of %d via %s ok", r, size, launcher)
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func childCmd(ctx context.Context, t *testing.T, launcher ...string) *exec.Cmd {
	args := append(launcher[1:], os.Args[0])
	cmd := exec.CommandContext(ctx, launcher[0], args...)
	cmd.Env = append(cleanEnv(), childEnv+"=1")
	return cmd
}

// cleanEnv drops launcher variables this test process may itself have.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "PMI_"), strings.HasPrefix(k, "PMIX_"), strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "SLURM_"), k == "RANK", k == "WORLD_SIZE", k == "MASTER_ADDR", k == "MASTER_PORT", k == "RIVET_JOB_SECRET", k == "SLURMD_NODENAME", strings.HasPrefix(k, "RIVET_RENDEZVOUS_"):
			continue
		}
		env = append(env, kv)
	}
	return env
}

func TestSingleton(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := childCmd(ctx, t, os.Args[0]).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	checkRanks(t, string(out), 1, "singleton")
}

func TestUnderRivetrun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rivetrun")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/rivetrun").CombinedOutput(); err != nil {
		t.Fatalf("building rivetrun: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := childCmd(ctx, t, bin, "-n", "4").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	checkRanks(t, string(out), 4, "pmi-2")
}

func TestUnderHydra(t *testing.T) {
	hydra := testutil.LookTool(t, "mpiexec.hydra", "mpich")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := childCmd(ctx, t, hydra, "-n", "4").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	checkRanks(t, string(out), 4, "pmi-2")
}

// TestForeign: a process one of several that a launcher Rivet cannot
// join started is told so, by name, never made a job of its own; a job
// of one, and a Slurm step (which srun describes whatever --mpi says),
// are not foreign. (Detect asks only once it found no PMIx server: with
// PMIX_NAMESPACE set, mpirun's processes join over PMIx.)
func TestForeign(t *testing.T) {
	step := []string{"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_STEP_NODELIST=n1"}
	for _, c := range []struct {
		env  []string
		want string // "" for none
	}{
		{[]string{"OMPI_COMM_WORLD_SIZE=2"}, "Open MPI's mpirun"},
		{[]string{"OMPI_COMM_WORLD_SIZE=1"}, ""},
		{[]string{"MV2_COMM_WORLD_SIZE=4"}, "mpirun_rsh"},
		{step, ""},
		{append([]string{"OMPI_COMM_WORLD_SIZE=2"}, step...), "Open MPI's mpirun"},
		{[]string{"OMPI_COMM_WORLD_SIZE=two"}, "Open MPI's mpirun"},
	} {
		setLauncherEnv(t, c.env)
		err := bootstrap.Foreign()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.want != "" && (!errors.Is(err, bootstrap.ErrForeignLauncher) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "rivetrun")):
			t.Errorf("%v: %v, want ErrForeignLauncher naming %s and what to use", c.env, err, c.want)
		}
	}
}

// TestInJob: a command that launches jobs of its own learns when another
// launcher started it as one of several — any PMIx server's process, Open
// MPI's and MVAPICH's of a job of two or more.
func TestInJob(t *testing.T) {
	step := []string{"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_STEP_NODELIST=n1"}
	for _, c := range []struct {
		env  []string
		want string // "" for none
	}{
		{[]string{"OMPI_COMM_WORLD_SIZE=2", "PMIX_NAMESPACE=1234", "PMIX_RANK=1"}, "Open MPI's mpirun"},
		{[]string{"OMPI_COMM_WORLD_SIZE=1"}, ""},
		{[]string{"MV2_COMM_WORLD_SIZE=4"}, "mpirun_rsh"},
		{[]string{"PMIX_NAMESPACE=prterun-x-1@1", "PMIX_RANK=0"}, "a PMIx server"},
		{append([]string{"PMIX_NAMESPACE=slurm.pmix.5.0", "PMIX_RANK=1"}, step...), "a PMIx server"},
		{step, ""},
		{nil, ""},
	} {
		setLauncherEnv(t, c.env)
		err := bootstrap.InJob()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.want != "" && (!errors.Is(err, bootstrap.ErrInJob) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want ErrInJob naming %s", c.env, err, c.want)
		}
	}
}

// setLauncherEnv clears every launcher variable the tests above read and
// sets env's.
func setLauncherEnv(t *testing.T, env []string) {
	for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_NAMESPACE", "PMIX_RANK",
		"SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		t.Setenv(k, "")
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// TestUnderMpirun: under Open MPI's mpirun the processes are one job,
// met over mpirun's PMIx server.
func TestUnderMpirun(t *testing.T) {
	mpirun := testutil.LookTool(t, "mpirun.openmpi", "openmpi-bin")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := childCmd(ctx, t, mpirun, "-n", "4", "--oversubscribe")
	cmd.Env = append(cmd.Env, "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("under mpirun -n 4: %v\n%s", err, out)
	}
	checkRanks(t, string(out), 4, "pmix")
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// runRanks starts the child once per rank, in the order given, with
// env(rank) added, pausing between starts; it returns all their output.
func runRanks(t *testing.T, order []int, pause time.Duration, env func(r int) []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all strings.Builder
	for _, r := range order {
		cmd := childCmd(ctx, t, os.Args[0])
		cmd.Env = append(cmd.Env, env(r)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			mu.Lock()
			defer mu.Unlock()
			all.Write(out)
			if err != nil {
				t.Errorf("rank %d: %v\n%s", r, err, out)
			}
		}()
		time.Sleep(pause)
	}
	wg.Wait()
	return all.String()
}

// TestTorchrunStyle starts four processes as torchrun would (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus the job secret; rank 0 starts
// last, so the others must wait for its store.
func TestTorchrunStyle(t *testing.T) {
	port := freePort(t)
	out := runRanks(t, []int{3, 2, 1, 0}, 100*time.Millisecond, func(r int) []string {
		return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT=" + port, "RIVET_JOB_SECRET=s3cret-for-the-test"}
	})
	checkRanks(t, out, 4, "torchrun")
}

// TestSlurmWithoutPMI starts four processes as srun --mpi=none would;
// they meet at rank 0's store on the first node of the nodelist, whose
// name is no host's: the ranks on it reach it over loopback, the others
// at the address RIVET_RENDEZVOUS_ADDR gives. (examples/slurm runs a real
// Slurm.)
func TestSlurmWithoutPMI(t *testing.T) {
	port := freePort(t)
	out := runRanks(t, []int{0, 1, 2, 3}, 0, func(r int) []string {
		env := []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=4", "SLURM_STEP_NUM_TASKS=4", "SLURM_JOB_ID=4242",
			"SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=nid[001-002]", "RIVET_RENDEZVOUS_PORT=" + port,
			"RIVET_JOB_SECRET=slurm-secret", "SLURM_NODEID=" + strconv.Itoa(r/2), "SLURMD_NODENAME=nid00" + strconv.Itoa(1+r/2)}
		if r >= 2 {
			env = append(env, "RIVET_RENDEZVOUS_ADDR=127.0.0.1")
		}
		return env
	})
	checkRanks(t, out, 4, "slurm")
}

func TestHostlist(t *testing.T) {
	for in, want := range map[string]string{
		"nid[001-003,010],login1": "nid001 nid002 nid003 nid010 login1",
		"a[1-2]b[08-09]":          "a1b08 a1b09 a2b08 a2b09",
		"node7":                   "node7",
		"gpu[9-11]-ib":            "gpu9-ib gpu10-ib gpu11-ib",
	} {
		got, err := bootstrap.ParseHostlist(in)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("%q: %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a[1-", "a[3-1]", "a]", "a[x]"} {
		if _, err := bootstrap.ParseHostlist(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestBootstrapErrors(t *testing.T) {
	s := bootstrap.Singleton()
	ctx := context.Background()
	if err := s.Put(ctx, "bad key", nil); err == nil {
		t.Error("key with a space accepted")
	}
	if _, err := s.Get(ctx, 1, "ep"); err == nil {
		t.Error("rank 1 of a singleton accepted")
	}
	if _, err := s.Get(ctx, 0, "never"); !errors.Is(err, bootstrap.ErrNotFound) {
		t.Errorf("missing key: %v", err)
	}
	for _, env := range [][]string{
		{"RANK=0", "WORLD_SIZE=2"},
		{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"},
		{"RANK=3", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1", "RIVET_JOB_SECRET=x"},
	} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(append(cleanEnv(), childEnv+"=1"), env...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("env %v: the child succeeded:\n%s", env, out)
		}
		if strings.Contains(strings.Join(env, " "), "MASTER_PORT") && !strings.Contains(strings.Join(env, " "), "SECRET") &&
			!strings.Contains(string(out), "RIVET_JOB_SECRET is not set") {
			t.Errorf("env %v: no word about the secret:\n%s", env, out)
		}
	}
}
