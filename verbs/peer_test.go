//go:build linux

package verbs

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// peerEnv makes the test binary act as a remote peer process: see peerMain.
const peerEnv = "RIVET_VERBS_TEST_PEER"

func TestMain(m *testing.M) {
	if dev := os.Getenv(peerEnv); dev != "" {
		peerMain(dev)
		return
	}
	os.Exit(m.Run())
}

// peerInfo is what the two processes exchange over the child's stdio.
type peerInfo struct {
	Endpoint Endpoint
	Buf      RemoteBuf
}

// peerMain opens dev, prints its QP's endpoint and buffer, reads the
// parent's endpoint, connects, says "ready" and waits to be killed.
func peerMain(dev string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "peer:", err); os.Exit(1) }
	ctx, err := Open(dev)
	if err != nil {
		fail(err)
	}
	pd, _ := ctx.AllocPD()
	cq, err := ctx.NewCQ(CQConfig{Size: 64})
	if err != nil {
		fail(err)
	}
	mr, err := pd.Alloc(1<<20, AccessAll)
	if err != nil {
		fail(err)
	}
	qp, err := pd.NewQP(QPConfig{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		fail(err)
	}
	g, err := hw.GIDByNetdev(ctx.Device().Ports[0].Netdev)
	if err != nil {
		fail(err)
	}
	json.NewEncoder(os.Stdout).Encode(peerInfo{qp.Endpoint(g.GID), mr.Remote()})
	var parent peerInfo
	if err := json.NewDecoder(os.Stdin).Decode(&parent); err != nil {
		fail(err)
	}
	if err := qp.Connect(parent.Endpoint, ConnectConfig{GIDIndex: -1}); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	select {}
}

// TestPeerKilled: a peer process is SIGKILLed while we stream writes to it.
// Its QP dies with it and its device drops our packets silently, so only
// our retransmission timer notices: the first outstanding request completes
// with retry-exceeded after at least retries periods, the rest are
// flushed, and nothing hangs. (Within RetryBound(timeout, retries) when
// the kernel runs its timers on time, which a loaded host does not
// promise a virtual machine: it once took 356 ms for a 336 ms bound, so
// that is logged, and only a wait of ten bounds fails.)
func TestPeerKilled(t *testing.T) {
	for _, p := range devicePairs(t) {
		t.Run(p[0]+"-"+p[1], func(t *testing.T) {
			const timeout, retries = 14, 3 // 67 ms periods; bound (3+2)·67 ms ≈ 336 ms
			a := openSide(t, p[0], sideConfig{})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), peerEnv+"="+p[1])
			cmd.Stderr = os.Stderr
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			out := bufio.NewReader(stdout)
			var peer peerInfo
			if err := json.NewDecoder(out).Decode(&peer); err != nil {
				t.Fatalf("peer endpoint: %v", err)
			}
			json.NewEncoder(stdin).Encode(peerInfo{Endpoint: a.endpoint()})
			if err := a.qp.Connect(peer.Endpoint, ConnectConfig{GIDIndex: -1, Timeout: timeout, RetryCount: retries}); err != nil {
				t.Fatal(err)
			}
			// Drain the peer's JSON line and read "ready".
			for line := ""; line != "ready\n"; {
				var err error
				if line, err = out.ReadString('\n'); err != nil {
					t.Fatalf("peer: %v", err)
				}
			}
			write := func(id uint64) error {
				return a.qp.PostSend(SendWR{ID: id, Op: OpRDMAWrite, Flags: Signaled,
					Local: []SGE{{MR: a.mr, Length: 4096}}, Remote: peer.Buf})
			}
			for i := uint64(0); i < 100; i++ { // mid-stream: the peer is alive and answering
				if err := write(i); err != nil {
					t.Fatal(err)
				}
				mustOK(t, waitWC(t, a.scq, 1, 5*time.Second))
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			start := time.Now()
			for i := uint64(100); i < 105; i++ {
				if err := write(i); err != nil {
					t.Fatal(err)
				}
			}
			bound := RetryBound(timeout, retries)
			wcs := waitWC(t, a.scq, 5, 10*bound)
			elapsed := time.Since(start)
			if !errors.Is(wcs[0].Err(), StatusRetryExcErr) {
				t.Fatalf("first completion after the kill: %v, want retry exceeded", wcs[0].Err())
			}
			for _, wc := range wcs[1:] {
				if !errors.Is(wc.Err(), StatusWRFlushErr) {
					t.Errorf("later completion: %v, want flushed", wc.Err())
				}
			}
			period := time.Duration(4096<<timeout) * time.Nanosecond
			t.Logf("retry exceeded %v after the kill (timeout %d, retry_cnt %d, period %v: expected between %v and %v)",
				elapsed.Round(time.Millisecond), timeout, retries, period.Round(time.Millisecond),
				(time.Duration(retries) * period).Round(time.Millisecond), bound.Round(time.Millisecond))
			if elapsed > bound {
				t.Logf("took %v, more than the bound %v: the host ran the VM's timers late", elapsed, bound)
			}
			if elapsed < time.Duration(retries)*period {
				t.Errorf("took only %v: fewer than %d retransmission periods", elapsed, retries)
			}
		})
	}
}

// TestAsyncPortEvents makes its own veth and rxe device, opens it, and sees
// PORT_ERR and PORT_ACTIVE from the device's async fd, merged into hw's
// link/port stream, when the netdev goes down and up.
func TestAsyncPortEvents(t *testing.T) {
	testutil.RXEDevices(t)
	testutil.RequireRoot(t)
	const netdev, dev = "rvv0", "rvverbs0"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("link", "add", netdev, "type", "veth", "peer", "name", "rvv1")
	defer exec.Command("ip", "link", "del", netdev).Run()
	run("link", "set", netdev, "up")
	run("link", "set", "rvv1", "up")
	if err := hw.AddRXE(dev, netdev); err != nil {
		t.Fatal(err)
	}
	defer hw.DeleteRXE(dev) // after the context is closed: deleting blocks while one is open
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := hw.DeviceByName(dev)
		if err == nil && d.Ports[0].State == hw.PortActive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became active", dev)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, err := Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	wctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	async, err := ctx.Events(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctx.Events(wctx); !errors.Is(err, ErrBusy) {
		t.Errorf("second event stream: %v, want ErrBusy", err)
	}
	merged, err := hw.Watch(wctx, async)
	if err != nil {
		t.Fatal(err)
	}
	expect := func(kind hw.EventKind) {
		t.Helper()
		start := time.Now()
		for {
			select {
			case e := <-merged:
				if e.Kind == kind && e.Device == dev && e.Code != 0 { // Code set: it came from the async fd
					t.Logf("%v after %v", e, time.Since(start).Round(time.Millisecond))
					return
				}
			case <-time.After(time.Second):
				t.Fatalf("no async %v within a second", kind)
			}
		}
	}
	run("link", "set", netdev, "down")
	expect(hw.EventPortDown)
	run("link", "set", netdev, "up")
	expect(hw.EventPortActive)
}
