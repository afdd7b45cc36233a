//go:build linux

package jobtest

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/launch"
)

// Programs is a test binary's registry of rank programs and the harness
// that runs them: TestMain calls Main, which runs the program the
// environment names as one rank of a job, or else the tests; tests start
// jobs with Run and OK. A program gets an endpoint of type E (a
// *fabric.Endpoint: the harness is generic so that fabric's own tests,
// which cannot import this package's importers, share it).
//
// After a program returns and its endpoint is closed, the harness checks
// that the rank left nothing behind: no file descriptor it did not have
// before Init (but the netpoller's), and no mapping of a shared-memory
// segment or of window memory.
type Programs[E any] struct {
	// Env is the variable that names the program a rank runs.
	Env string
	// Init makes a rank's endpoint; Close closes it; Rank is its world rank.
	Init  func(ctx context.Context) (E, error)
	Close func(E) error
	Rank  func(E) int
	// Timeout bounds a program (default 2 minutes).
	Timeout time.Duration

	progs   map[string]func(context.Context, E) error
	preInit map[string]func()
}

// Add registers a program under name.
func (p *Programs[E]) Add(name string, prog func(ctx context.Context, ep E) error) {
	if p.progs == nil {
		p.progs = map[string]func(context.Context, E) error{}
	}
	p.progs[name] = prog
}

// BeforeInit registers what the ranks of program name run before Init.
func (p *Programs[E]) BeforeInit(name string, f func()) {
	if p.preInit == nil {
		p.preInit = map[string]func(){}
	}
	p.preInit[name] = f
}

// Main is TestMain: it runs the program Env names, as a rank, or the tests.
func (p *Programs[E]) Main(m *testing.M) {
	if name := os.Getenv(p.Env); name != "" {
		os.Exit(p.rank(name))
	}
	os.Exit(m.Run())
}

// Run runs program prog on n ranks and returns stdout, stderr and the
// job's status.
func (p *Programs[E]) Run(t testing.TB, n int, prog string, ft bool, env ...string) (string, string, int) {
	t.Helper()
	return Job(t, n, ft, append([]string{p.Env + "=" + prog}, env...)...)
}

// RunWith runs program prog as the job o describes (see JobWith).
func (p *Programs[E]) RunWith(t testing.TB, o launch.Options, prog string) (string, string, int) {
	t.Helper()
	o.Env = append([]string{p.Env + "=" + prog}, o.Env...)
	return JobWith(t, o)
}

// OK runs prog on n ranks and fails the test unless every rank finished.
func (p *Programs[E]) OK(t testing.TB, n int, prog string, env ...string) string {
	t.Helper()
	return JobOK(t, n, append([]string{p.Env + "=" + prog}, env...)...)
}

// Failure is what Failf panics with; the harness reports it as the
// rank's error.
type Failure struct{ error }

// Failf ends the running program with an error.
func Failf(format string, args ...any) { panic(Failure{fmt.Errorf(format, args...)}) }

// Must ends the running program if err is not nil.
func Must(err error, what string) {
	if err != nil {
		Failf("%s: %v", what, err)
	}
}

// rank runs program name as this process's rank and returns its exit
// status.
func (p *Programs[E]) rank(name string) (status int) {
	prog := p.progs[name]
	if prog == nil {
		fmt.Fprintf(os.Stderr, "no program %q\n", name)
		return 2
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if f := p.preInit[name]; f != nil {
		f()
	}
	before := OpenFDs()
	ep, err := p.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 1
	}
	r := p.Rank(ep)
	defer func() {
		if v := recover(); v != nil {
			if f, ok := v.(Failure); ok {
				fmt.Fprintf(os.Stderr, "rank %d: %v\n", r, f.error)
			} else {
				fmt.Fprintf(os.Stderr, "rank %d: panic: %v\n%s", r, v, debug.Stack())
			}
			status = 1
		}
	}()
	if err := prog(ctx, ep); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", r, err)
		return 1
	}
	if err := p.Close(ep); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: close: %v\n", r, err)
		return 1
	}
	if leak := Leaks(before); leak != "" {
		fmt.Fprintf(os.Stderr, "rank %d: %s\n", r, leak)
		return 1
	}
	fmt.Printf("rank %d ok\n", r)
	return 0
}

// OpenFDs maps this process's open file descriptors to what they are.
func OpenFDs() map[string]string {
	ents, _ := os.ReadDir("/proc/self/fd")
	m := make(map[string]string, len(ents))
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			m[e.Name()] = target
		}
	}
	return m
}

// Leaks says what a closed endpoint left behind, given the descriptors
// open before it was made: a descriptor (but the netpoller's, which the
// runtime keeps; the launcher's PMI and failure-notice descriptors are
// among those before, and Close closes them), a mapped shared-memory
// segment, or mapped window memory. It returns "" for nothing. A
// descriptor open for a moment — a directory of /proc that sysmon's
// guard reads while the runtime makes threads — is not a leak: a new
// descriptor must still be there a little later.
func Leaks(before map[string]string) string {
	var leak string
	for range 2 {
		leak = ""
		for fd, target := range OpenFDs() {
			if _, ok := before[fd]; !ok && target != "anon_inode:[eventpoll]" && target != "anon_inode:[eventfd]" {
				leak = fmt.Sprintf("leaked fd %s -> %s", fd, target)
				break
			}
		}
		if leak == "" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if leak != "" {
		return leak
	}
	maps, _ := os.ReadFile("/proc/self/maps")
	switch {
	case strings.Contains(string(maps), "/dev/shm/rivet"):
		return "a shared-memory segment is still mapped after Close"
	case strings.Contains(string(maps), "memfd:rivet"):
		return "window memory is still mapped after Free and Close"
	}
	return ""
}
