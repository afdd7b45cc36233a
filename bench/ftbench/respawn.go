//go:build linux

package ftbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/ft"
	"github.com/rivet-hpc/rivet/op"
)

// RespawnOptions shape Respawn's run.
type RespawnOptions struct {
	Rounds int      // of each measurement (default 5)
	Args   []string // the arguments that run Respawn again in a spawned process (rivet bench ft_respawn …)
}

// RespawnUniverse is the universe Respawn needs on n processes: one
// spawn of 1 and one of n per round, and a replacement per recovery.
func RespawnUniverse(n, rounds int) int { return n + rounds*(1+n) + rounds }

// What the spawner tells a spawned process (its first message).
const (
	childLeave = iota // a spawn measured alone: leave
	childJoin         // a replacement: take number [1], join at round [2]
)

// Respawn measures, on the job of ep (n processes), what getting back to
// full size costs, and prints rows as Recover does, in milliseconds:
//
//   - spawn 1, spawn n: Comm.Spawn over the world, from the call to its
//     return at the root (the children have started, joined the
//     universe, and made the intercommunicator);
//   - a recovery round: the process with number n/2 is killed (SIGKILL)
//     right after a barrier, and every survivor times: detect (until a
//     receive from it raised, or the first survivor to know revoked), shrink (revoke and ft.Shrink), spawn (one
//     replacement) and merge (the replacement's hand-over: Merge, then
//     Split by number, and an agreement on the result), and all of it.
//     The replacement takes the dead one's number and the next round.
//
// The row of a step gives the average over the survivors of their
// median over rounds, the smallest and the largest of those medians. A
// spawned process runs Respawn too (o.Args): it either leaves at once or
// joins the rounds.
func Respawn(ctx context.Context, ep *fabric.Endpoint, o RespawnOptions, out io.Writer) error {
	if o.Rounds <= 0 {
		o.Rounds = 5
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	comm, num, round := ep.World(), ep.World().Rank(), 0
	if p := ep.Parent(); p != nil {
		hdr := make([]int64, 3)
		if _, err := fabric.RecvSlice(ctx, p, hdr, 0, 1); err != nil {
			return err
		}
		if hdr[0] == childLeave {
			// The others' word too (a spawner killed by the recovery
			// rounds since need not give it).
			for r := 1; r < p.RemoteSize(); r++ {
				fabric.RecvSlice(ctx, p, hdr, r, 1)
			}
			return nil
		}
		num, round = int(hdr[1]), int(hdr[2])
		if comm, err = rejoin(ctx, p, true, num); err != nil {
			return fmt.Errorf("ftbench: a replacement's rejoin: %w", err)
		}
	} else {
		n := comm.Size()
		if n < 3 || ep.UniverseSize() < RespawnUniverse(n, o.Rounds) {
			return fmt.Errorf("ftbench: respawn on %d processes in a universe of %d (want 3 or more, and a universe of %d): %w",
				n, ep.UniverseSize(), RespawnUniverse(n, o.Rounds), fabric.ErrInvalid)
		}
		if comm.Rank() == 0 {
			fmt.Fprintf(out, "# Rivet Fault-Tolerance Respawn Test: %d ranks\n", n)
			fmt.Fprintf(out, "%-20s%18s%18s%18s%12s\n", "# Operation", "Avg Latency(ms)", "Min Latency(ms)", "Max Latency(ms)", "Iterations")
		}
		for _, k := range []int{1, n} {
			times := make([]time.Duration, 0, o.Rounds)
			for range o.Rounds {
				if err := collectives.Barrier(ctx, comm); err != nil {
					return err
				}
				t0 := time.Now()
				ic, err := comm.Spawn(ctx, 0, self, o.Args, k)
				if err != nil {
					return err
				}
				times = append(times, time.Since(t0))
				// Every spawner tells every child to leave: a child
				// leaves once all have joined it.
				for c := range k {
					if err := fabric.SendSlice(ctx, ic, []int64{childLeave, 0, 0}, c, 1); err != nil {
						return err
					}
				}
				if err := ic.Free(); err != nil {
					return err
				}
			}
			if err := report(ctx, comm, fmt.Sprintf("spawn %d", k), times, out); err != nil {
				return err
			}
		}
	}
	// Recovery rounds.
	var rows [5][]time.Duration
	for ; round < o.Rounds; round++ {
		n := comm.Size()
		victim := n / 2
		// The victim dies as its barrier returns: a survivor still in the
		// barrier then may see it raise — the victim's failure, or the
		// revoke of a survivor that learned of it first. That is the
		// failure being measured, not an error of the run (a survivor
		// that gave up here once left the others waiting for it).
		if err := collectives.Barrier(ctx, comm); err != nil && !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
			return fmt.Errorf("ftbench: round %d: the barrier before the kill: %w", round, err)
		}
		if num == victim {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		t0 := time.Now()
		// It ends when this process learns of the failure, or when one
		// that learned first revokes the communicator.
		if _, err := comm.Recv(ctx, nil, victim, 77); !errors.Is(err, fabric.ErrProcFailed) && !errors.Is(err, fabric.ErrRevoked) {
			return fmt.Errorf("ftbench: a receive from the killed process: %v", err)
		}
		t1 := time.Now()
		comm.Revoke()
		s, err := ft.Shrink(ctx, comm)
		if err != nil {
			return fmt.Errorf("ftbench: round %d: shrink: %w", round, err)
		}
		t2 := time.Now()
		ic, err := s.Spawn(ctx, 0, self, o.Args, 1)
		if err != nil {
			return fmt.Errorf("ftbench: round %d: spawn: %w", round, err)
		}
		t3 := time.Now()
		if s.Rank() == 0 {
			if err := fabric.SendSlice(ctx, ic, []int64{childJoin, int64(victim), int64(round + 1)}, 0, 1); err != nil {
				return err
			}
		}
		next, err := rejoin(ctx, ic, false, num)
		if err != nil {
			return fmt.Errorf("ftbench: round %d: rejoin: %w", round, err)
		}
		t4 := time.Now()
		for i, d := range []time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3), t4.Sub(t0)} {
			rows[i] = append(rows[i], d)
		}
		ic.Free()
		s.Free()
		if comm != ep.World() {
			comm.Free()
		}
		comm = next
	}
	// The rounds' rows, over the processes that lived through them all:
	// those that took part in every round (not a replacement) report.
	full := len(rows[0]) == o.Rounds
	flag := 0
	if full {
		flag = 1
	}
	sub, err := comm.Split(ctx, 1-flag, comm.Rank())
	if err != nil {
		return fmt.Errorf("ftbench: splitting off the reporters: %w", err)
	}
	defer sub.Free()
	if !full {
		return nil
	}
	for i, name := range []string{"recover: detect", "recover: shrink", "recover: spawn", "recover: merge", "recover: total"} {
		if err := report(ctx, sub, name, rows[i], out); err != nil {
			return err
		}
	}
	return nil
}

// rejoin is either side of a replacement's hand-over: merge (the
// spawners low, the replacement high), then order by number, then agree
// that it worked.
func rejoin(ctx context.Context, ic *fabric.Comm, high bool, num int) (*fabric.Comm, error) {
	m, err := ic.Merge(ctx, high)
	if err != nil {
		return nil, err
	}
	defer m.Free()
	next, err := m.Split(ctx, 0, num)
	if err != nil {
		return nil, err
	}
	if _, err := ft.Agree(ctx, next, 1); err != nil {
		return nil, err
	}
	return next, nil
}

// report prints a row: the average over c's members of their median, the
// smallest and the largest median, in milliseconds.
func report(ctx context.Context, c *fabric.Comm, name string, times []time.Duration, out io.Writer) error {
	slices.Sort(times)
	med := []float64{float64(times[len(times)/2].Nanoseconds()) / 1e6}
	lo, hi, sum := make([]float64, 1), make([]float64, 1), make([]float64, 1)
	for _, r := range []struct {
		dst []float64
		o   op.Op[float64]
	}{{lo, op.Min[float64]()}, {hi, op.Max[float64]()}, {sum, op.Sum[float64]()}} {
		if err := collectives.Allreduce(ctx, c, med, r.dst, r.o); err != nil {
			return err
		}
	}
	if c.Rank() == 0 {
		fmt.Fprintf(out, "%-20s%18.2f%18.2f%18.2f%12d\n", name, sum[0]/float64(c.Size()), lo[0], hi[0], len(times))
	}
	return nil
}
