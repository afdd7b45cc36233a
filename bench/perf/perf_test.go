package perf

import (
	"bytes"
	"context"
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
	} {
		if _, err := Run(context.Background(), c, &bytes.Buffer{}); err == nil {
			t.Errorf("Run(%+v) succeeded", c)
		}
	}
	c := Config{Test: AtomicLat, Size: 64, Inline: -1}
	if err := c.defaults(); err != nil || c.Size != 8 || c.Iters != 1000 || c.Port != 18515 {
		t.Errorf("atomic defaults: %+v, %v", c, err)
	}
	c = Config{Test: WriteBW, Inline: -1}
	if err := c.defaults(); err != nil || c.Size != 65536 || c.Iters != 5000 || c.TxDepth != 128 || c.Inline != 220 {
		t.Errorf("bandwidth defaults: %+v, %v", c, err)
	}
}
