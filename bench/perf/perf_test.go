//go:build linux

package perf

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestAllTests runs every test, server and client in one process, and
// checks that the client reports plausible figures in perftest's layout.
func TestAllTests(t *testing.T) {
	devs := testutil.RXEDevices(t)
	for i, test := range Tests {
		t.Run(test, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := Config{Test: test, Device: devs[0], GIDIndex: -1, Inline: -1, Iters: 200, Port: 18800 + i, Size: 4096}
			srvCfg := cfg
			srvErr := make(chan error, 1)
			go func() {
				_, err := Run(ctx, srvCfg, &bytes.Buffer{})
				srvErr <- err
			}()
			cfg.Server = "127.0.0.1"
			var out bytes.Buffer
			res, err := Run(ctx, cfg, &out)
			if err != nil {
				t.Fatalf("client: %v\n%s", err, out.String())
			}
			if err := <-srvErr; err != nil {
				t.Fatalf("server: %v", err)
			}
			t.Logf("\n%s", out.String())
			if len(res) != 1 {
				t.Fatalf("%d results", len(res))
			}
			r := res[0]
			if cfg.isBW() {
				if r.BWAvg <= 0 || r.BWPeak < r.BWAvg || r.MsgRate <= 0 {
					t.Errorf("bandwidth result %+v", r)
				}
				if !strings.Contains(out.String(), "BW average[MB/sec]") {
					t.Error("no bandwidth header")
				}
			} else {
				if r.Min <= 0 || r.Min > r.Typical || r.Typical > r.Max || r.P99 > r.Max || r.Avg <= 0 {
					t.Errorf("latency result %+v", r)
				}
				if !strings.Contains(out.String(), "t_typical[usec]") {
					t.Error("no latency header")
				}
			}
		})
	}
}

// TestAllSizes runs the ping-pong tests over several sizes on one QP, as -a
// does: what one size leaves posted must serve the next.
func TestAllSizes(t *testing.T) {
	devs := testutil.RXEDevices(t)
	old := allSizesMax
	allSizesMax = 4096
	defer func() { allSizesMax = old }()
	for i, test := range []string{SendLat, WriteLat} {
		t.Run(test, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := Config{Test: test, Device: devs[0], GIDIndex: -1, Inline: -1, Iters: 100, Port: 18850 + i, AllSizes: true}
			srvCfg := cfg
			srvErr := make(chan error, 1)
			go func() { _, err := Run(ctx, srvCfg, &bytes.Buffer{}); srvErr <- err }()
			cfg.Server = "127.0.0.1"
			res, err := Run(ctx, cfg, &bytes.Buffer{})
			if serr := <-srvErr; serr != nil || err != nil {
				t.Fatalf("server: %v; client: %v", serr, err)
			}
			if len(res) != 12 || res[0].Size != 2 || res[11].Size != 4096 {
				t.Errorf("%d results, sizes %d … %d; want 12 from 2 to 4096", len(res), res[0].Size, res[len(res)-1].Size)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Test: "nope"},
		{Test: WriteLat, Size: -1},
		{Test: WriteLat, Size: 16 << 20},
		{Test: WriteBW, Iters: 2},
		{Test: AtomicLat, Atomic: "XOR"},
		{Test: WriteBW, TxDepth: 100000},
		{Test: WriteBW, Histogram: true},
		{Test: ReadBW, Unsorted: true},
	} {
		if _, err := Run(context.Background(), c, &bytes.Buffer{}); err == nil {
			t.Errorf("Run(%+v) succeeded", c)
		}
	}
	c := Config{Test: AtomicLat, Size: 64, Inline: -1}
	if err := c.defaults(); err != nil || c.Size != 8 || c.Iters != 1000 || c.Port != 18515 {
		t.Errorf("atomic defaults: %+v, %v", c, err)
	}
	c = Config{Test: ReadLat, Unsorted: true}
	if err := c.defaults(); err != nil || !c.Histogram {
		t.Errorf("-U without -H: %+v, %v; want Histogram set", c, err)
	}
	c = Config{Test: WriteBW, Inline: -1}
	if err := c.defaults(); err != nil || c.Size != 65536 || c.Iters != 5000 || c.TxDepth != 128 || c.Inline != 220 {
		t.Errorf("bandwidth defaults: %+v, %v", c, err)
	}
}

// TestPrintSamples checks perftest's -H and -U layout on made-up samples.
func TestPrintSamples(t *testing.T) {
	samples := []time.Duration{30500 * time.Nanosecond, 12 * time.Microsecond, 1234567 * time.Nanosecond}
	for _, tc := range []struct {
		sorted bool
		want   string
	}{
		{false, "#, usec\n1, 30.5\n2, 12\n3, 1234.57\n"},
		{true, "#, usec\n1, 12\n2, 30.5\n3, 1234.57\n"},
	} {
		var b bytes.Buffer
		printSamples(&b, samples, tc.sorted)
		if b.String() != tc.want {
			t.Errorf("sorted %v: got %q, want %q", tc.sorted, b.String(), tc.want)
		}
	}
	if samples[0] != 30500*time.Nanosecond {
		t.Error("printing sorted samples reordered the caller's slice")
	}
}

// TestHistogram runs a ping-pong with -U and an operation test with -H on
// rxe and checks the listed iterations against the result: all of them, in
// the order measured or sorted, with the row still last.
func TestHistogram(t *testing.T) {
	devs := testutil.RXEDevices(t)
	for i, test := range []string{WriteLat, ReadLat} {
		t.Run(test, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := Config{Test: test, Device: devs[0], GIDIndex: -1, Inline: -1, Iters: 60, Port: 18870 + i, Size: 64,
				Unsorted: test == WriteLat, Histogram: test == ReadLat}
			srvCfg := cfg
			srvErr := make(chan error, 1)
			go func() { _, err := Run(ctx, srvCfg, &bytes.Buffer{}); srvErr <- err }()
			cfg.Server = "127.0.0.1"
			var out bytes.Buffer
			res, err := Run(ctx, cfg, &out)
			if serr := <-srvErr; serr != nil || err != nil {
				t.Fatalf("server: %v; client: %v", serr, err)
			}
			r := res[0]
			if len(r.Samples) != cfg.Iters {
				t.Fatalf("%d samples, want %d", len(r.Samples), cfg.Iters)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			start := slices.Index(lines, "#, usec")
			if start < 0 {
				t.Fatalf("no histogram in\n%s", out.String())
			}
			var got []float64
			for k, l := range lines[start+1:] {
				var n int
				var v float64
				if _, err := fmt.Sscanf(l, "%d, %g", &n, &v); err != nil {
					break
				}
				if n != k+1 {
					t.Fatalf("line %q: index %d, want %d", l, n, k+1)
				}
				got = append(got, v)
			}
			if len(got) != cfg.Iters {
				t.Fatalf("%d histogram lines, want %d", len(got), cfg.Iters)
			}
			want := slices.Clone(r.Samples)
			if cfg.Histogram && !cfg.Unsorted {
				slices.Sort(want)
			}
			for k, v := range got {
				if w := float64(want[k]) / 1e3; math.Abs(v-w) > 1e-5*w {
					t.Fatalf("line %d: %g µs, want %g", k+1, v, w)
				}
			}
			if first := float64(slices.Min(r.Samples)) / 1e3; math.Abs(slices.Min(got)-first) > 1e-5*first || slices.Min(r.Samples) != r.Min {
				t.Errorf("smallest sample %g µs, t_min %v", slices.Min(got), r.Min)
			}
			if row := lines[len(lines)-2]; !strings.HasPrefix(row, " 64 ") {
				t.Errorf("the row is not last before the rule: %q", row)
			}
		})
	}
}
