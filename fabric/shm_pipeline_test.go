//go:build linux

package fabric

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/shm"
)

func init() {
	progs.Add("pipeline", progPipeline)
	progs.Add("pipekill", progPipeKill)
}

// progPipeline: two ranks move rendezvous messages both ways at once —
// blocking ping-pongs, which go by pipeline, then windows of Isend/Irecv,
// where the first message from a peer goes by pipeline and the others
// arriving meanwhile by process_vm_readv — and a truncated one. Every
// byte is checked; each rank reports how its messages went.
func progPipeline(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	peer := 1 - w.Rank()
	sizes := []int{shm.Eager + 1, shm.Frag - 1, shm.Frag, shm.Frag + 1, 100000, 1 << 20, 3<<20 + 5, testPipeMax, testPipeMax + 1}
	for _, n := range sizes {
		want := pattern(n, w.Rank())
		got := make([]byte, n)
		st, err := w.Sendrecv(ctx, want, peer, n%1000, got, peer, n%1000)
		must(err, fmt.Sprintf("sendrecv %d", n))
		if st.Count != n || !bytes.Equal(got, pattern(n, peer)) {
			failf("sendrecv of %d bytes: got %d, content differs", n, st.Count)
		}
	}
	// Windows: every size at once, several times (the ring wraps many
	// times over).
	for round := 0; round < 3; round++ {
		var reqs []Request
		var bufs [][]byte
		for i, n := range sizes {
			b := make([]byte, n)
			r, err := w.Irecv(b, peer, i)
			must(err, "irecv")
			reqs, bufs = append(reqs, r), append(bufs, b)
		}
		for i, n := range sizes {
			r, err := w.Isend(pattern(n, w.Rank()+round), peer, i)
			must(err, "isend")
			reqs = append(reqs, r)
		}
		must(WaitAll(ctx, reqs, nil), "waitall")
		for i, n := range sizes {
			if !bytes.Equal(bufs[i], pattern(n, peer+round)) {
				failf("round %d: the %d-byte message differs", round, n)
			}
		}
	}
	// A longer message than the buffer keeps its prefix.
	if w.Rank() == 0 {
		must(w.Send(ctx, pattern(300000, 7), 1, 5), "send long")
	} else {
		half := make([]byte, 150001)
		st, err := w.Recv(ctx, half, 0, 5)
		if !errors.Is(err, ErrTruncated) || st.Count != len(half) || !bytes.Equal(half, pattern(300000, 7)[:len(half)]) {
			failf("truncated pipeline receive: %d bytes, %v", st.Count, err)
		}
	}
	ep.e.mu.Lock()
	piped, readv := ep.shm.Moved()
	ep.e.mu.Unlock()
	fmt.Printf("rank %d: piped=%d readv=%d\n", w.Rank(), piped, readv)
	return nil
}

// testPipeMax is the pipeline limit the tests turn on.
const testPipeMax = 4 << 20

// TestShmPipeline runs progPipeline with the pipeline on
// (RIVET_SHM_PIPELINE_MAX), and off (the default), and checks which way
// the messages went.
func TestShmPipeline(t *testing.T) {
	counts := func(out string) (piped, readv []int) {
		for _, m := range regexp.MustCompile(`piped=(\d+) readv=(\d+)`).FindAllStringSubmatch(out, -1) {
			p, _ := strconv.Atoi(m[1])
			r, _ := strconv.Atoi(m[2])
			piped, readv = append(piped, p), append(readv, r)
		}
		if len(piped) != 2 {
			t.Fatalf("no counts from both ranks:\n%s", out)
		}
		return piped, readv
	}
	on := fmt.Sprintf("RIVET_SHM_PIPELINE_MAX=%d", testPipeMax)
	piped, readv := counts(runOK(t, 2, "pipeline", "RIVET_PROVIDER=shm", on))
	for r := range 2 {
		// The ping-pongs pipeline every size up to the limit (8 of 9)
		// and read the one above it; each of the 3 windows pipelines at
		// least its first message and reads at least the one above the
		// limit (rank 1 also pipelines the truncated message).
		if piped[r] < 8+3 || readv[r] < 1+3 {
			t.Errorf("rank %d: %d messages by pipeline, %d by read", r, piped[r], readv[r])
		}
	}
	piped, readv = counts(runOK(t, 2, "pipeline", "RIVET_PROVIDER=shm"))
	for r := range 2 {
		if piped[r] != 0 || readv[r] < 9 {
			t.Errorf("pipeline off, rank %d: %d messages by pipeline, %d by read", r, piped[r], readv[r])
		}
	}
	_, errs, st := runJob(t, 2, "pipeline", false, "RIVET_SHM_PIPELINE_MAX=lots")
	if st == 0 || !strings.Contains(errs, "RIVET_SHM_PIPELINE_MAX") {
		t.Errorf("a bad RIVET_SHM_PIPELINE_MAX: status %d\n%s", st, errs)
	}
}

// progPipeKill: rank 2 dies a megabyte into a pipelined message to rank
// 0, while rank 1 streams one to it. Rank 0's receive fails with
// ErrProcFailed, promptly: the message can never complete. Rank 1's send
// either succeeds or fails with ErrProcFailed — rank 2 progresses its
// posted receive while it sends, so the whole message may be in its
// buffer before it dies, and a send to a process that dies later may
// legitimately succeed (MPI 4.1 §16.2.2). 0 and 1 still move a pipelined
// message.
func progPipeKill(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	const n = 4 << 20
	switch w.Rank() {
	case 2:
		shm.TestHookFragment = func(peer, off int) {
			if peer == 0 && off >= 1<<20 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
		r, err := w.Irecv(make([]byte, n), 1, 1)
		must(err, "irecv")
		w.Send(ctx, pattern(n, 2), 0, 2)
		r.Wait(ctx)
		failf("still alive")
	case 0:
		t0 := time.Now()
		_, err := w.Recv(ctx, make([]byte, n), 2, 2)
		var pe *PeerError
		if !errors.Is(err, ErrProcFailed) || !errors.As(err, &pe) || pe.Rank != 2 {
			failf("receive from the rank that died mid-message: %v", err)
		}
		if took := time.Since(t0); took > 5*time.Second {
			failf("the failure took %v to surface", took)
		}
	case 1:
		err := w.Send(ctx, pattern(n, 1), 2, 1)
		var pe *PeerError
		if err != nil && (!errors.Is(err, ErrProcFailed) || !errors.As(err, &pe) || pe.Rank != 2) {
			failf("send to the rank that died: %v", err)
		}
	}
	peer := 1 - w.Rank()
	got := make([]byte, 1<<20)
	if _, err := w.Sendrecv(ctx, pattern(1<<20, w.Rank()), peer, 9, got, peer, 9); err != nil || !bytes.Equal(got, pattern(1<<20, peer)) {
		failf("survivors: %v", err)
	}
	return nil
}

func TestShmPipelinePeerKilled(t *testing.T) {
	out, errs, st := runJob(t, 3, "pipekill", true, "RIVET_PROVIDER=shm", fmt.Sprintf("RIVET_SHM_PIPELINE_MAX=%d", testPipeMax))
	if st != 128+9 {
		t.Fatalf("status %d, want 137 (rank 2 killed)\n%s\n%s", st, out, errs)
	}
	for r := 0; r < 2; r++ {
		if !strings.Contains(out, fmt.Sprintf("[%d] rank %d ok", r, r)) {
			t.Fatalf("survivor %d did not finish:\n%s\n%s", r, out, errs)
		}
	}
}
