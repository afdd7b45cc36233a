//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/verbs"
)

func TestWireFormat(t *testing.T) {
	g, _ := hw.ParseGID("::ffff:192.0.2.1")
	e := verbs.Endpoint{GID: g, QPN: 0x11, PSN: 0x25d5c6}
	b := encode(e)
	// What the C program's gid_to_wire_gid and sprintf produce.
	want := "0000:000011:25d5c6:00000000000000000000ffffc0000201\x00"
	if string(b) != want || len(b) != wireLen {
		t.Fatalf("encode = %q, want %q", b, want)
	}
	back, err := decode(b)
	if err != nil || back != e {
		t.Errorf("decode = %+v, %v", back, err)
	}
	for _, bad := range []string{"", "0000:000011:25d5c6:zz000000000000000000ffffc0000201\x00", strings.Repeat("x", wireLen)} {
		if _, err := decode([]byte(bad)); err == nil {
			t.Errorf("decode(%q) succeeded", bad)
		}
	}
}

// TestInteropWithLibibverbs runs this program against the real
// ibv_rc_pingpong (rdma-core, C, libibverbs), as client and as server.
// Each side checks nothing but its own completions; this side also checks
// every byte the C side sent.
func TestInteropWithLibibverbs(t *testing.T) {
	devs := testutil.RXEDevices(t)
	if _, err := exec.LookPath("ibv_rc_pingpong"); err != nil {
		testutil.Unavailable(t, "ibv_rc_pingpong (ibverbs-utils) not installed")
	}
	dev := devs[len(devs)-1]
	d, err := hw.DeviceByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	g, err := hw.GIDByNetdev(d.Ports[0].Netdev)
	if err != nil {
		t.Fatal(err)
	}
	gidx := itoa(g.Index)
	for _, tc := range []struct {
		name     string
		cArgs    []string // the C program's
		goArgs   []string // ours
		goServer bool
		port     int
		iters    string
	}{
		{"go-client", []string{"-d", dev, "-g", gidx, "-p", "18601", "-n", "500", "-s", "4096"},
			[]string{"-d", devs[0], "-p", "18601", "-n", "500", "-s", "4096", "127.0.0.1"}, false, 18601, "500"},
		{"go-server", []string{"-d", devs[0], "-g", gidx, "-p", "18602", "-n", "500", "-s", "64", "127.0.0.1"},
			[]string{"-d", dev, "-p", "18602", "-n", "500", "-s", "64"}, true, 18602, "500"},
		{"go-client-events", []string{"-d", dev, "-g", gidx, "-p", "18603", "-n", "200", "-s", "65536", "-e"},
			[]string{"-d", devs[0], "-p", "18603", "-n", "200", "-s", "65536", "-e", "127.0.0.1"}, false, 18603, "200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c := exec.CommandContext(ctx, "ibv_rc_pingpong", tc.cArgs...)
			var cOut bytes.Buffer
			c.Stdout, c.Stderr = &cOut, &cOut
			var goOut bytes.Buffer
			var goErr error
			if tc.goServer {
				done := make(chan struct{})
				go func() { goErr = run(ctx, tc.goArgs, &goOut); close(done) }()
				waitListening(t, tc.port)
				if err := c.Run(); err != nil {
					t.Errorf("C client: %v\n%s", err, cOut.String())
				}
				<-done
			} else {
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				waitListening(t, tc.port)
				goErr = run(ctx, tc.goArgs, &goOut)
				if err := c.Wait(); err != nil {
					t.Errorf("C server: %v\n%s", err, cOut.String())
				}
			}
			if goErr != nil {
				t.Errorf("Go side: %v\n%s", goErr, goOut.String())
			}
			t.Logf("C (libibverbs):\n%sGo (Rivet):\n%s", cOut.String(), goOut.String())
			for _, o := range []string{cOut.String(), goOut.String()} {
				if !strings.Contains(o, tc.iters+" iters in") {
					t.Errorf("a side did not finish its %s iterations", tc.iters)
				}
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// waitListening waits until something listens on TCP port (state 0A in
// /proc/net/tcp or tcp6), without connecting to it.
func waitListening(t *testing.T, port int) {
	t.Helper()
	want := fmt.Sprintf(":%04X ", port)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			b, _ := os.ReadFile(f)
			for _, line := range strings.Split(string(b), "\n") {
				fields := strings.Fields(line)
				if len(fields) > 3 && strings.HasSuffix(fields[1]+" ", want) && fields[3] == "0A" {
					return
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on port %d", port)
}
