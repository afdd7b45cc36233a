//go:build linux

// Package ftbench measures Rivet's fault tolerance: how long a failure
// takes to be known by every survivor (Detect, rivet bench ft_detect).
package ftbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
)

// Faults a round can inject.
const (
	Kill = "kill" // SIGKILL
	Stop = "stop" // SIGSTOP (a hung process), then SIGCONT once known
)

// monotonic is CLOCK_MONOTONIC in nanoseconds: one clock for every
// process of the machine (Go's monotonic readings are the process's own).
func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Round runs one detection round as a rank of the job on w: rank 0
// injects the fault into the victim (the middle rank) once every rank is
// ready, and every survivor waits in a receive from the victim until it
// fails. Rank 0 returns the time from the fault to the last survivor
// knowing; the others return 0. The fault ends the victim's process
// (Stop: with fabric.ExitDeclaredFailed, once it is continued).
func Round(ctx context.Context, ep *fabric.Endpoint, fault string) (time.Duration, error) {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	v := n / 2
	if n < 2 || fault != Kill && fault != Stop {
		return 0, fmt.Errorf("ftbench: %d ranks, fault %q: %w", n, fault, fabric.ErrInvalid)
	}
	if ep.Sources()&fabric.SourceHeartbeat != 0 {
		d, err := ft.Start(ctx, ep, ft.Options{})
		if err != nil {
			return 0, err
		}
		defer d.Stop()
	}
	if err := collectives.Barrier(ctx, w); err != nil {
		return 0, err
	}
	var b [8]byte
	switch me {
	case v:
		binary.LittleEndian.PutUint64(b[:], uint64(os.Getpid()))
		if err := w.Send(ctx, b[:], 0, 1); err != nil {
			return 0, err
		}
		select {} // until the fault
	case 0:
		if _, err := w.Recv(ctx, b[:], v, 1); err != nil {
			return 0, err
		}
		pid := int(binary.LittleEndian.Uint64(b[:]))
		for r := 1; r < n; r++ {
			if r != v {
				if _, err := w.Recv(ctx, nil, r, 2); err != nil {
					return 0, err
				}
			}
		}
		sig := syscall.SIGKILL
		if fault == Stop {
			sig = syscall.SIGSTOP
			defer syscall.Kill(pid, syscall.SIGCONT)
		}
		// A fault strikes at any moment of the victim's heartbeat period,
		// not just after a beat: Start's handshake leaves the ranks
		// in step with the beats that it waited for.
		if p := ep.HeartbeatPeriod(); p > 0 {
			time.Sleep(rand.N(p))
		}
		t0 := monotonic()
		syscall.Kill(pid, sig)
		last := awaitFailed(ctx, w, v)
		for r := 1; r < n; r++ {
			if r != v {
				if _, err := w.Recv(ctx, b[:], r, 3); err != nil {
					return 0, err
				}
				last = max(last, int64(binary.LittleEndian.Uint64(b[:])))
			}
		}
		for r := 1; r < n; r++ {
			if r != v {
				if err := w.Send(ctx, nil, r, 4); err != nil {
					return 0, err
				}
			}
		}
		return time.Duration(last - t0), nil
	default:
		if err := w.Send(ctx, nil, 0, 2); err != nil {
			return 0, err
		}
		binary.LittleEndian.PutUint64(b[:], uint64(awaitFailed(ctx, w, v)))
		if err := w.Send(ctx, b[:], 0, 3); err != nil {
			return 0, err
		}
		// Wait, in the library, until every survivor knows: a survivor
		// that went on to close its endpoint and exit would take the CPU
		// from those still to learn, on a node with more ranks than CPUs,
		// and the round would time this program's teardown.
		_, err := w.Recv(ctx, nil, 0, 4)
		return 0, err
	}
}

// awaitFailed waits in a receive from v until it fails with
// ErrProcFailed and returns the monotonic time it did.
func awaitFailed(ctx context.Context, w *fabric.Comm, v int) int64 {
	for {
		_, err := w.Recv(ctx, nil, v, 9)
		if errors.Is(err, fabric.ErrProcFailed) || ctx.Err() != nil {
			return monotonic()
		}
	}
}

// Report prints the rounds' figures as OSU prints a latency row: the
// median over rounds, then the fastest and slowest, in milliseconds.
func Report(out io.Writer, title string, rounds []time.Duration) {
	fmt.Fprintf(out, "# %s\n", title)
	fmt.Fprintf(out, "%-10s%18s%18s%18s\n", "# Rounds", "Median (ms)", "Min (ms)", "Max (ms)")
	if len(rounds) == 0 {
		return
	}
	s := slices.Clone(rounds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	fmt.Fprintf(out, "%-10d%18.2f%18.2f%18.2f\n", len(s), ms(s[(len(s)-1)/2]), ms(s[0]), ms(s[len(s)-1]))
}
