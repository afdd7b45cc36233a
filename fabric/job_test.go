//go:build linux

package fabric

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/jobtest"
)

// progEnv makes the test binary run one of progs, as one rank of a job
// the test started with internal/launch (rivetrun's engine).
const progEnv = "RIVET_FABRIC_PROG"

var progs = map[string]func(ctx context.Context, ep *Endpoint) error{}

func TestMain(m *testing.M) {
	if prog := os.Getenv(progEnv); prog != "" {
		os.Exit(runProg(prog))
	}
	os.Exit(m.Run())
}

// preInit runs before Init in a program's processes.
var preInit = map[string]func(){}

// failf ends a program with an error; runProg turns the panic back into one.
type progFailure struct{ error }

func failf(format string, args ...any) { panic(progFailure{fmt.Errorf(format, args...)}) }

func must(err error, what string) {
	if err != nil {
		failf("%s: %v", what, err)
	}
}

func runProg(name string) (status int) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if h := preInit[name]; h != nil {
		h()
	}
	fdsBefore := openFDs()
	ep, err := Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 1
	}
	defer func() {
		if p := recover(); p != nil {
			if f, ok := p.(progFailure); ok {
				fmt.Fprintf(os.Stderr, "rank %d: %v\n", ep.World().Rank(), f.error)
			} else {
				fmt.Fprintf(os.Stderr, "rank %d: panic: %v\n%s", ep.World().Rank(), p, debug.Stack())
			}
			status = 1
		}
	}()
	if err := progs[name](ctx, ep); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", ep.World().Rank(), err)
		return 1
	}
	if err := ep.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: close: %v\n", ep.World().Rank(), err)
		return 1
	}
	// Close leaves no file descriptor (but the netpoller's, and the PMI
	// and -ft descriptors the launcher handed in, which Close also
	// closes) and no mapping of a segment.
	for fd, target := range openFDs() {
		if _, ok := fdsBefore[fd]; !ok && target != "anon_inode:[eventpoll]" && target != "anon_inode:[eventfd]" {
			fmt.Fprintf(os.Stderr, "rank %d: leaked fd %s -> %s\n", ep.World().Rank(), fd, target)
			return 1
		}
	}
	if maps, _ := os.ReadFile("/proc/self/maps"); strings.Contains(string(maps), "/dev/shm/rivet") {
		fmt.Fprintf(os.Stderr, "rank %d: a segment is still mapped after Close\n", ep.World().Rank())
		return 1
	}
	fmt.Printf("rank %d ok\n", ep.World().Rank())
	return 0
}

// runJob runs prog on n ranks and returns its output and status.
func runJob(t *testing.T, n int, prog string, ft bool, env ...string) (string, string, int) {
	t.Helper()
	return jobtest.Job(t, n, ft, append([]string{progEnv + "=" + prog}, env...)...)
}

// runOK runs prog and fails the test unless every rank says ok.
func runOK(t *testing.T, n int, prog string, env ...string) string {
	t.Helper()
	return jobtest.JobOK(t, n, append([]string{progEnv + "=" + prog}, env...)...)
}

func openFDs() map[string]string {
	ents, _ := os.ReadDir("/proc/self/fd")
	m := make(map[string]string, len(ents))
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			m[e.Name()] = target
		}
	}
	return m
}
