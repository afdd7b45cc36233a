//go:build linux

package fabric

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/launch"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() {
	progs.Add("crowd", progCrowd)
	// Four peers' first credits take the whole pool (4 × 64 of 256).
	progs.BeforeInit("crowd", func() { testHookVerbsInitial = 64 })
	progs.Add("rxmem", progRxMem)
	progs.BeforeInit("rxmem", func() { os.Setenv("RIVET_NODE", os.Getenv("PMI_RANK")) })
}

// progCrowd: five senders stream to rank 0, whose receive pool cannot
// hold their windows: the four that connect first get 64 credits each,
// the whole pool, so the fifth starts with none and asks, and rank 0
// must take unused credits back from the others to give it any. Every
// message arrives, in order per sender.
func progCrowd(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	const each = 3000
	if w.Rank() != 0 {
		_, err := w.Sendrecv(ctx, nil, 0, 6, nil, 0, 6)
		must(err, "warm-up")
		sendSeq(ctx, ep, each)
		return nil
	}
	for r := 1; r < w.Size(); r++ {
		_, err := w.Sendrecv(ctx, nil, r, 6, nil, r, 6)
		must(err, "warm-up")
	}
	time.Sleep(200 * time.Millisecond) // the senders run out of credits
	recvSeq(ctx, ep, each)
	ep.e.mu.Lock()
	pool := ep.verbs.Pool()
	ep.e.mu.Unlock()
	fmt.Printf("pool: %+v\n", pool)
	if pool.Revokes == 0 {
		failf("no credits were taken back, though a peer started with none: %+v", pool)
	}
	if pool.Committed > pool.Buffers {
		failf("%d credits out for %d buffers", pool.Committed, pool.Buffers)
	}
	return nil
}

func TestVerbsCrowd(t *testing.T) {
	devs := testutil.RXEDevices(t)
	testutil.LogRXECountersOnFailure(t)
	check := noRNR(t, devs[0], "a frame found the pool empty")
	out := runOK(t, 6, "crowd", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+devs[0])
	t.Log(strings.TrimSpace(out))
	check()
}

// progRxMem: rank 0 sends to 1, 8 and then all of its peers (32), each
// on a node of its own (so over verbs), and reports after each step the
// memory its registrations pin (VmPin) and its proportional set size.
// Registered memory must not grow with the peers: they share one pool.
// (The peers test for their message and sleep between tests: 32
// processes spinning in a wait would starve rank 0 of the VM's CPUs.)
func progRxMem(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	if w.Rank() != 0 {
		req, err := w.Irecv(make([]byte, 1), 0, 7)
		must(err, "irecv")
		for {
			_, done, err := req.Test()
			must(err, "test")
			if done {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	talked, pinned0 := 1, int64(-1)
	for _, k := range []int{1, 8, w.Size() - 1} {
		for ; talked <= k; talked++ {
			must(w.Send(ctx, []byte{1}, talked, 7), "send")
		}
		pinned, pss := procKiB("/proc/self/status", "VmPin:"), procKiB("/proc/self/smaps_rollup", "Pss:")
		ep.e.mu.Lock()
		qps, pool := len(ep.verbs.QueuePairs()), ep.verbs.Pool()
		ep.e.mu.Unlock()
		fmt.Printf("peers %d: queue pairs %d, receive pool %d KiB, pinned %d KiB, pss %d KiB\n", k, qps, pool.Bytes>>10, pinned, pss)
		if qps != k {
			failf("%d queue pairs after talking to %d peers", qps, k)
		}
		if pinned0 < 0 {
			pinned0 = pinned
		} else if pinned != pinned0 {
			failf("pinned memory grew from %d KiB at 1 peer to %d KiB at %d", pinned0, pinned, k)
		}
	}
	return nil
}

// procKiB reads the value, in KiB, of the line starting with key in a
// /proc file.
func procKiB(file, key string) int64 {
	f, err := os.Open(file)
	must(err, "open")
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			must(err, "parse "+key)
			return n
		}
	}
	failf("%s has no %s", file, key)
	return 0
}

// TestVerbsReceiveMemory: over verbs, receive memory does not grow with
// the peers a process talks to — 1, 8 or 32 of them. (At 64 ranks, 63
// peers, the VM's two emulated CPUs beside a loaded host made fewer
// than 50 connections in the program's two minutes; the memory needs
// no more peers to show it does not grow.)
func TestVerbsReceiveMemory(t *testing.T) {
	devs := testutil.RXEDevices(t)
	const n = 33
	out, errs, st := progs.RunWith(t, launch.Options{N: n,
		Env: []string{"RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE=" + strings.Join(devs, ",")}}, "rxmem")
	if st != 0 || strings.Count(out, " ok") != n {
		t.Fatalf("status %d\n%s\n%s", st, out, errs)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "peers ") {
			t.Log(strings.TrimSpace(l))
		}
	}
}
