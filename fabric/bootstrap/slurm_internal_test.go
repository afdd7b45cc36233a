//go:build linux

package bootstrap

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/pmi"
)

func TestAliasAddr(t *testing.T) {
	aliases := "n1:10.0.0.1:host1,n2:[fd00::2]:host2,n3::host3"
	for name, want := range map[string]string{"n1": "10.0.0.1", "n2": "fd00::2", "n3": "", "n4": ""} {
		if got, ok := aliasAddr(aliases, name); got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", name, got, ok, want)
		}
	}
}

// pmiRank is rank of a job whose launcher is srv, as Detect makes it.
func pmiRank(t *testing.T, srv *pmi.Server, rank int) *pmiBootstrap {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	cl, sv := os.NewFile(uintptr(fds[0]), "client"), os.NewFile(uintptr(fds[1]), "server")
	t.Cleanup(func() { cl.Close(); sv.Close() })
	go srv.Serve(context.Background(), rank, sv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pmi.NewClient(ctx, cl, rank, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return &pmiBootstrap{c: c}
}

// TestSlurmPlacement: what srun's PMI server says of the ranks' places
// and of the step is checked against the step's environment.
func TestSlurmPlacement(t *testing.T) {
	for _, k := range []string{"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NODEID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"} {
		t.Setenv(k, "")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name, jobid, mapping string
		env                  []string // key=value
		rank                 int
		want                 string // in the error; "" for none
	}{
		{"srun", "7.0", "(vector,(0,2,2))", []string{"SLURM_NODEID=1", "SLURM_PROCID=2", "SLURM_STEP_NUM_TASKS=4", "SLURM_NTASKS=4"}, 2, ""},
		{"malformed", "7.0", "(vector,(0,2", []string{"SLURM_NODEID=0"}, 0, `PMI_process_mapping "(vector,(0,2" is malformed`},
		{"wrong node", "7.0", "(vector,(0,2,1))", []string{"SLURM_NODEID=0"}, 1, "puts rank 1 on node 1, but it runs on node 0 (SLURM_NODEID)"},
		{"missing under srun", "7.0", "", []string{"SLURM_NODEID=0"}, 0, "srun's PMI server gives no PMI_process_mapping"},
		{"missing elsewhere", "hydra-1", "", nil, 0, "gives no PMI_process_mapping"},
		{"size", "7.0", "(vector,(0,2,2))", []string{"SLURM_NODEID=0", "SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=3"}, 0, "srun's PMI server says rank 0 of 4, but the step's environment says rank 0 of 3"},
		{"ntasks", "7.0", "(vector,(0,2,2))", []string{"SLURM_NODEID=0", "SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=4", "SLURM_NTASKS=2"}, 0, "the Slurm step has 4 tasks (SLURM_STEP_NUM_TASKS) but SLURM_NTASKS=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SLURM_JOB_ID", "7")
			t.Setenv("SLURM_STEP_ID", "0")
			t.Setenv("SLURM_PROCID", strconv.Itoa(tc.rank))
			t.Setenv("SLURM_STEP_NUM_TASKS", "4")
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			srv := pmi.NewServer(4, tc.jobid)
			srv.Mapping = tc.mapping
			b := pmiRank(t, srv, tc.rank)
			err := checkSlurmPMI(b.c)
			if err == nil {
				_, err = b.Nodes(ctx)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%v, want %q", err, tc.want)
			case tc.name == "missing elsewhere" && !errors.Is(err, ErrNotFound):
				t.Errorf("%v does not match ErrNotFound", err)
			}
		})
	}
}

// TestSlurmPort: the derived store port stays below Linux's ephemeral
// ports (32768 and up by default), where any connection's local end may
// hold it, and RIVET_RENDEZVOUS_PORT overrides it.
func TestSlurmPort(t *testing.T) {
	t.Setenv("RIVET_RENDEZVOUS_PORT", "")
	for job := range 2000 {
		t.Setenv("SLURM_JOB_ID", strconv.Itoa(job))
		t.Setenv("SLURM_STEP_ID", "0")
		p, err := slurmPort()
		if err != nil || p < 20000 || p >= 32768 {
			t.Fatalf("job %d: port %d, %v", job, p, err)
		}
	}
	t.Setenv("RIVET_RENDEZVOUS_PORT", "40000")
	if p, err := slurmPort(); p != 40000 || err != nil {
		t.Errorf("RIVET_RENDEZVOUS_PORT=40000: %d, %v", p, err)
	}
}
