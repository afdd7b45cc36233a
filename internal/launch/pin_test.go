//go:build linux

package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// childEnv makes the test binary report its start instead of testing.
const childEnv = "LAUNCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		reportStart()
		return
	}
	if os.Getenv(spawnEnv) != "" {
		os.Exit(spawnProc())
	}
	os.Exit(m.Run())
}

// reportStart prints GOMAXPROCS as the runtime chose it at start, every
// thread's CPU mask and the tuning variable.
func reportStart() {
	procs := runtime.GOMAXPROCS(0)
	fmt.Printf("gomaxprocs %d cpus %v tune %q\n", procs, testutil.ThreadCPUs(), os.Getenv(TuneEnv))
}

// TestBind: pinned, rank r runs on CPU r mod NumCPU from its start —
// every thread, and the runtime chose GOMAXPROCS 1 by itself — and
// unpinned on every CPU; the ranks are asked to tune their process
// unless the job's environment says otherwise. Options' zero value pins
// a job whose ranks fit the CPUs (every caller that does not say
// otherwise — rivet bench -np, rivetrun — launches so), and leaves an
// oversubscribed one free.
func TestBind(t *testing.T) {
	n := runtime.NumCPU()
	all := make([]string, n)
	for c := range all {
		all[c] = strconv.Itoa(c)
	}
	pinned := func(r int) string { return fmt.Sprintf("[%d] gomaxprocs 1 cpus [%d] tune \"1\"", r, r%n) }
	free := func(r int) string {
		return fmt.Sprintf("[%d] gomaxprocs %d cpus [%s] tune \"1\"", r, n, strings.Join(all, ","))
	}
	for _, tc := range []struct {
		bind  Binding
		ranks int
		env   []string
		want  func(r int) string
	}{
		{BindCore, n + 1, nil, pinned},
		{BindNone, 3, []string{TuneEnv + "=0"}, func(r int) string {
			return fmt.Sprintf("[%d] gomaxprocs %d cpus [%s] tune \"0\"", r, n, strings.Join(all, ","))
		}},
		{BindAuto, n, nil, pinned},
		{BindAuto, n + 1, nil, free},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var out, errb bytes.Buffer
		env := append([]string{childEnv + "=1", "GOMAXPROCS="}, tc.env...)
		st := Run(ctx, Options{N: tc.ranks, Tag: true, Bind: tc.bind, Env: env, Stdout: &out, Stderr: &errb}, []string{os.Args[0]})
		cancel()
		if st != 0 {
			t.Fatalf("bind %v: status %d\n%s%s", tc.bind, st, out.String(), errb.String())
		}
		for r := 0; r < tc.ranks; r++ {
			if want := tc.want(r); !strings.Contains(out.String(), want+"\n") {
				t.Errorf("bind %v, %d ranks on %d CPUs: want %q in\n%s", tc.bind, tc.ranks, n, want, out.String())
			}
		}
	}
}

// TestParseBinding: rivetrun's -bind-to values, and a clear error.
func TestParseBinding(t *testing.T) {
	for in, want := range map[string]Binding{"auto": BindAuto, "": BindAuto, "core": BindCore, "none": BindNone} {
		if b, err := ParseBinding(in); err != nil || b != want {
			t.Errorf("ParseBinding(%q) = %v, %v; want %v", in, b, err, want)
		}
	}
	if _, err := ParseBinding("socket"); err == nil || !strings.Contains(err.Error(), "want core, none or auto") {
		t.Errorf("ParseBinding(socket): %v", err)
	}
}
