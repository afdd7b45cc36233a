//go:build linux

package fabric

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/jobtest"
)

// progEnv makes the test binary run one of progs, as one rank of a job
// the test started with internal/launch (rivetrun's engine).
const progEnv = "RIVET_FABRIC_PROG"

// progs are the programs the tests run as the ranks of a job.
var progs = jobtest.Programs[*Endpoint]{
	Env:     progEnv,
	Init:    func(ctx context.Context) (*Endpoint, error) { return Init(ctx) },
	Close:   (*Endpoint).Close,
	Rank:    func(ep *Endpoint) int { return ep.World().Rank() },
	Timeout: 120 * time.Second,
}

func TestMain(m *testing.M) { progs.Main(m) }

var (
	failf = jobtest.Failf
	must  = jobtest.Must
)

// ownNodes makes each rank of program name a node of its own
// (RIVET_NODE), as on a cluster, when apart says so in the rank.
func ownNodes(name string, apart func() bool) {
	progs.BeforeInit(name, func() {
		if apart() {
			os.Setenv("RIVET_NODE", os.Getenv("PMI_RANK"))
		}
	})
}

// runJob runs prog on n ranks and returns its output and status.
func runJob(t *testing.T, n int, prog string, ft bool, env ...string) (string, string, int) {
	t.Helper()
	return progs.Run(t, n, prog, ft, env...)
}

// runOK runs prog and fails the test unless every rank says ok.
func runOK(t *testing.T, n int, prog string, env ...string) string {
	t.Helper()
	return progs.OK(t, n, prog, env...)
}
