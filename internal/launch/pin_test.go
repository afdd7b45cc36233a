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
	os.Exit(m.Run())
}

// reportStart prints GOMAXPROCS as the runtime chose it at start, every
// thread's CPU mask and the tuning variable.
func reportStart() {
	procs := runtime.GOMAXPROCS(0)
	fmt.Printf("gomaxprocs %d cpus %v tune %q\n", procs, testutil.ThreadCPUs(), os.Getenv(TuneEnv))
}

// TestBind: with Bind, rank r runs on CPU r mod NumCPU from its start —
// every thread, and the runtime chose GOMAXPROCS 1 by itself — and
// without it on every CPU; the ranks are asked to tune their process
// unless the job's environment says otherwise.
func TestBind(t *testing.T) {
	n := runtime.NumCPU()
	all := make([]string, n)
	for c := range all {
		all[c] = strconv.Itoa(c)
	}
	for _, tc := range []struct {
		bind bool
		env  []string
		want func(r int) string
	}{
		{true, nil, func(r int) string { return fmt.Sprintf("[%d] gomaxprocs 1 cpus [%d] tune \"1\"", r, r%n) }},
		{false, []string{TuneEnv + "=0"}, func(r int) string {
			return fmt.Sprintf("[%d] gomaxprocs %d cpus [%s] tune \"0\"", r, n, strings.Join(all, ","))
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var out, errb bytes.Buffer
		env := append([]string{childEnv + "=1", "GOMAXPROCS="}, tc.env...)
		st := Run(ctx, Options{N: 3, Tag: true, Bind: tc.bind, Env: env, Stdout: &out, Stderr: &errb}, []string{os.Args[0]})
		cancel()
		if st != 0 {
			t.Fatalf("bind %v: status %d\n%s%s", tc.bind, st, out.String(), errb.String())
		}
		for r := 0; r < 3; r++ {
			if want := tc.want(r); !strings.Contains(out.String(), want+"\n") {
				t.Errorf("bind %v: want %q in\n%s", tc.bind, want, out.String())
			}
		}
	}
}
