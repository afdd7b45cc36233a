//go:build linux

package osu

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/critpath"
)

// Run runs b between ranks 0 and 1 of c (other ranks wait), printing on
// rank 0 to w.
func (b Benchmark) Run(ctx context.Context, c *fabric.Comm, o Options, w io.Writer) error {
	if c.Size() < 2 {
		return fmt.Errorf("%s: this test requires at least two processes (have %d)", b.Name, c.Size())
	}
	if c.Rank() == 0 {
		b.Header(w, o)
	}
	if c.Rank() > 1 {
		return nil
	}
	// Like OSU's buffers, which MPI libraries register once and cache,
	// these come from AllocMem, which RDMA providers move in place.
	ep := c.Endpoint()
	sbuf, err := ep.AllocMem(max(o.MaxSize, 1))
	if err != nil {
		return err
	}
	defer ep.FreeMem(sbuf)
	rbuf, err := ep.AllocMem(max(o.MaxSize, 1))
	if err != nil {
		return err
	}
	defer ep.FreeMem(rbuf)
	for i := range sbuf {
		sbuf[i] = 'a'
	}
	var each []float64 // per-iteration one-way latencies, for --percentiles
	prog := rank0Progress(c, b.Name)
	defer prog.Done()
	sizes := o.sizes()
	for i, size := range sizes {
		prog.Step(i+1, len(sizes), fmt.Sprintf("%d bytes", size))
		iters, warm := o.counts(size)
		var v float64
		var err error
		switch b.kind {
		case kindLatency:
			if o.Percentiles {
				each = slices.Grow(each[:0], iters)[:iters]
			}
			v, err = latency(ctx, c, sbuf[:size], rbuf[:size], iters, warm, each)
		case kindBW:
			v, err = bandwidth(ctx, c, sbuf[:size], rbuf[:size], iters, warm, o.Window)
		case kindBiBW:
			v, err = biBandwidth(ctx, c, sbuf[:size], rbuf[:size], iters, warm, o.Window)
		}
		if err != nil {
			return fmt.Errorf("%s at %d bytes: %w", b.Name, size, err)
		}
		if c.Rank() == 0 {
			if o.Percentiles && b.kind == kindLatency {
				row(w, o.Decimals, size, v, percentiles(each)...)
			} else {
				row(w, o.Decimals, size, v)
			}
		}
	}
	return nil
}

// latency is osu_latency: a blocking ping-pong; one-way time in µs. If
// each is not nil (it has iters elements), it also receives each timed
// iteration's one-way time, half of the round trip.
func latency(ctx context.Context, c *fabric.Comm, s, r []byte, iters, warm int, each []float64) (float64, error) {
	if err := pairBarrier(ctx, c); err != nil {
		return 0, err
	}
	var start, last time.Time
	var tsc0 uint64
	for i := 0; i < iters+warm; i++ {
		if i == warm {
			start = time.Now()
			last = start
			tsc0 = critpath.Now()
			critpath.Reset()
		} else if i > warm && each != nil {
			now := time.Now()
			each[i-warm-1] = now.Sub(last).Seconds() * 1e6 / 2
			last = now
		}
		if c.Rank() == 0 {
			if err := c.Send(ctx, s, 1, 1); err != nil {
				return 0, err
			}
			if _, err := c.Recv(ctx, r, 1, 1); err != nil {
				return 0, err
			}
		} else {
			if _, err := c.Recv(ctx, r, 0, 1); err != nil {
				return 0, err
			}
			if err := c.Send(ctx, s, 0, 1); err != nil {
				return 0, err
			}
		}
	}
	end := time.Now()
	if critpath.Enabled {
		reportCritPath(c.Rank(), end.Sub(start), critpath.Now()-tsc0)
	}
	if each != nil && iters > 0 {
		each[iters-1] = end.Sub(last).Seconds() * 1e6 / 2
	}
	return end.Sub(start).Seconds() * 1e6 / float64(2*iters), nil
}

// reportCritPath prints, in a build with the rivetprobe tag, this rank's
// mean time from a message's arrival to its next send's doorbell over the
// timed loop, which took d and tsc ticks of the time-stamp counter.
func reportCritPath(rank int, d time.Duration, tsc uint64) {
	ticks, n := critpath.Tally()
	if n == 0 || tsc == 0 {
		return
	}
	us := float64(ticks) / float64(n) * d.Seconds() * 1e6 / float64(tsc)
	fmt.Fprintf(os.Stderr, "# rank %d: arrival to doorbell %.3f us (mean of %d)\n", rank, us, n)
}

// percentileCols name the figures percentiles returns.
var percentileCols = []string{"P50 Latency(us)", "P90 Latency(us)", "P99 Latency(us)", "Max Latency(us)"}

// percentiles sorts v and returns its 50th, 90th and 99th percentiles
// (nearest rank) and its maximum; zeros if v is empty.
func percentiles(v []float64) []float64 {
	out := make([]float64, len(percentileCols))
	if len(v) == 0 {
		return out
	}
	slices.Sort(v)
	for i, p := range []int{50, 90, 99} {
		out[i] = v[(p*len(v)+99)/100-1] // nearest rank: the ⌈p·n/100⌉-th smallest
	}
	out[3] = v[len(v)-1]
	return out
}

// bandwidth is osu_bw: windows of nonblocking sends, each answered by a
// short acknowledgement; MB/s (10^6 bytes).
func bandwidth(ctx context.Context, c *fabric.Comm, s, r []byte, iters, warm, window int) (float64, error) {
	reqs := make([]fabric.Request, window)
	ack := make([]byte, 4)
	if err := pairBarrier(ctx, c); err != nil {
		return 0, err
	}
	var start time.Time
	var err error
	for i := 0; i < iters+warm; i++ {
		if i == warm {
			start = time.Now()
		}
		if c.Rank() == 0 {
			for j := range reqs {
				if reqs[j], err = c.Isend(s, 1, 100); err != nil {
					return 0, err
				}
			}
			if err := fabric.WaitAll(ctx, reqs, nil); err != nil {
				return 0, err
			}
			if _, err := c.Recv(ctx, ack, 1, 101); err != nil {
				return 0, err
			}
		} else {
			for j := range reqs {
				if reqs[j], err = c.Irecv(r, 0, 100); err != nil {
					return 0, err
				}
			}
			if err := fabric.WaitAll(ctx, reqs, nil); err != nil {
				return 0, err
			}
			if err := c.Send(ctx, ack, 0, 101); err != nil {
				return 0, err
			}
		}
	}
	t := time.Since(start).Seconds()
	return float64(len(s)) / 1e6 * float64(iters*window) / t, nil
}

// biBandwidth is osu_bibw: both ranks send a window to each other at once.
func biBandwidth(ctx context.Context, c *fabric.Comm, s, r []byte, iters, warm, window int) (float64, error) {
	reqs := make([]fabric.Request, 2*window)
	peer := 1 - c.Rank()
	if err := pairBarrier(ctx, c); err != nil {
		return 0, err
	}
	var start time.Time
	var err error
	for i := 0; i < iters+warm; i++ {
		if i == warm {
			start = time.Now()
		}
		for j := 0; j < window; j++ {
			if reqs[j], err = c.Irecv(r, peer, 10); err != nil {
				return 0, err
			}
		}
		for j := 0; j < window; j++ {
			if reqs[window+j], err = c.Isend(s, peer, 10); err != nil {
				return 0, err
			}
		}
		if err := fabric.WaitAll(ctx, reqs, nil); err != nil {
			return 0, err
		}
	}
	t := time.Since(start).Seconds()
	return float64(len(s)) / 1e6 * float64(iters*window) * 2 / t, nil
}

// pairBarrier lines ranks 0 and 1 up before a timed loop.
func pairBarrier(ctx context.Context, c *fabric.Comm) error {
	peer := 1 - c.Rank()
	_, err := c.Sendrecv(ctx, nil, peer, 77, nil, peer, 77)
	return err
}
