//go:build linux

package osu

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

// CollOptions are OSU's options for the collective benchmarks.
type CollOptions struct {
	Options
	Full      bool // -f: min, max and iterations too
	TestCalls int  // -t: Test calls during the nonblocking tests' compute
}

// Collective is one of OSU's collective benchmarks.
type Collective struct {
	Name        string
	Title       string
	nonblocking bool
	sized       bool // has a size column (all but barrier)
	// call runs one blocking operation on size bytes (as OSU's blocking
	// tests call MPI_Allreduce and not MPI_Iallreduce + MPI_Wait), start
	// one nonblocking operation; bufs are sized for the largest message.
	call  func(ctx context.Context, c *fabric.Comm, b *collBufs, size int) error
	start func(c *fabric.Comm, b *collBufs, size int) (fabric.Request, error)
}

type collBufs struct{ send, recv []byte }

var sumBytes = op.Sum[byte]()

// Collectives are OSU 7.4's collective benchmarks that Rivet runs.
var Collectives = []Collective{
	{Name: "osu_barrier", Title: "OSU MPI Barrier Latency Test", call: func(ctx context.Context, c *fabric.Comm, _ *collBufs, _ int) error {
		return collectives.Barrier(ctx, c)
	}},
	{Name: "osu_bcast", Title: "OSU MPI Broadcast Latency Test", sized: true, call: func(ctx context.Context, c *fabric.Comm, b *collBufs, n int) error {
		return collectives.Bcast(ctx, c, b.send[:n], 0)
	}},
	{Name: "osu_reduce", Title: "OSU MPI Reduce Latency Test", sized: true, call: func(ctx context.Context, c *fabric.Comm, b *collBufs, n int) error {
		return collectives.Reduce(ctx, c, b.send[:n], b.recv[:n], sumBytes, 0)
	}},
	{Name: "osu_allreduce", Title: "OSU MPI Allreduce Latency Test", sized: true, call: func(ctx context.Context, c *fabric.Comm, b *collBufs, n int) error {
		return collectives.Allreduce(ctx, c, b.send[:n], b.recv[:n], sumBytes)
	}},
	{Name: "osu_allgather", Title: "OSU MPI Allgather Latency Test", sized: true, call: func(ctx context.Context, c *fabric.Comm, b *collBufs, n int) error {
		return collectives.Allgather(ctx, c, b.send[:n], b.recv[:n*c.Size()])
	}},
	{Name: "osu_alltoall", Title: "OSU MPI All-to-All Personalized Exchange Latency Test", sized: true, call: func(ctx context.Context, c *fabric.Comm, b *collBufs, n int) error {
		return collectives.Alltoall(ctx, c, b.send[:n*c.Size()], b.recv[:n*c.Size()])
	}},
	{Name: "osu_gather", Title: "OSU MPI Gather Latency Test", sized: true, call: func(ctx context.Context, c *fabric.Comm, b *collBufs, n int) error {
		return collectives.Gather(ctx, c, b.send[:n], b.recv[:n*c.Size()], 0)
	}},
	{Name: "osu_scatter", Title: "OSU MPI Scatter Latency Test", sized: true, call: func(ctx context.Context, c *fabric.Comm, b *collBufs, n int) error {
		return collectives.Scatter(ctx, c, b.send[:n*c.Size()], b.recv[:n], 0)
	}},
	{Name: "osu_reduce_scatter", Title: "OSU MPI Reduce_scatter Latency Test", sized: true, call: func(ctx context.Context, c *fabric.Comm, b *collBufs, n int) error {
		counts := make([]int, c.Size())
		for i := range counts {
			counts[i] = n / c.Size()
			if i < n%c.Size() {
				counts[i]++
			}
		}
		return collectives.ReduceScatter(ctx, c, b.send[:n], b.recv[:counts[c.Rank()]], counts, sumBytes)
	}},
	{Name: "osu_ibarrier", Title: "OSU MPI Non-blocking Barrier Latency Test", nonblocking: true, start: func(c *fabric.Comm, _ *collBufs, _ int) (fabric.Request, error) {
		return collectives.Ibarrier(c)
	}},
	{Name: "osu_ibcast", Title: "OSU MPI Non-blocking Broadcast Latency Test", nonblocking: true, sized: true, start: func(c *fabric.Comm, b *collBufs, n int) (fabric.Request, error) {
		return collectives.Ibcast(c, b.send[:n], 0)
	}},
	{Name: "osu_iallreduce", Title: "OSU MPI Non-blocking Allreduce Latency Test", nonblocking: true, sized: true, start: func(c *fabric.Comm, b *collBufs, n int) (fabric.Request, error) {
		return collectives.Iallreduce(c, b.send[:n], b.recv[:n], sumBytes)
	}},
	{Name: "osu_ialltoall", Title: "OSU MPI Non-blocking All-to-All Latency Test", nonblocking: true, sized: true, start: func(c *fabric.Comm, b *collBufs, n int) (fabric.Request, error) {
		return collectives.Ialltoall(c, b.send[:n*c.Size()], b.recv[:n*c.Size()])
	}},
}

// LookupCollective finds a collective benchmark by OSU name.
func LookupCollective(name string) (Collective, bool) {
	for _, b := range Collectives {
		if b.Name == name {
			return b, true
		}
	}
	return Collective{}, false
}

// ParseArgs reads OSU's collective options: -m [MIN:]MAX, -i, -x, -f, and
// -t for the nonblocking tests.
func (b Collective) ParseArgs(args []string, stderr io.Writer) (CollOptions, error) {
	o := CollOptions{Options: Options{MinSize: 1, MaxSize: 1 << 20, Iterations: 1000, Warmup: 100, IterLarge: 100, WarmupLarge: 10}}
	fs, common := newFlags(b.Name, stderr, b.sized)
	full := fs.Bool("f", false, "print min, max and iterations too")
	var tests *int
	if b.nonblocking {
		tests = fs.Int("t", 0, "Test `calls` during the dummy compute")
	}
	if err := common(args, &o.Options); err != nil {
		return o, err
	}
	o.MinSize = max(o.MinSize, 1) // collectives start at 1 byte
	if !b.sized {
		o.MinSize, o.MaxSize = 0, 0
	}
	o.Full = *full
	if tests != nil {
		if *tests < 0 {
			return o, fmt.Errorf("%w: -t %d", ErrUsage, *tests)
		}
		o.TestCalls = *tests
	}
	return o, nil
}

// Header writes OSU's preamble for b.
func (b Collective) Header(w io.Writer, o CollOptions) {
	fmt.Fprintf(w, "\n# %s v%s\n", b.Title, Version)
	if b.nonblocking {
		fmt.Fprint(w, "# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n\n")
	}
	if b.sized {
		fmt.Fprint(w, "# Datatype: MPI_CHAR.\n")
	}
	first := "Avg Latency(us)"
	if b.nonblocking {
		first = "Overall(us)"
	}
	if b.sized {
		fmt.Fprintf(w, "%-*s%*s", 10, "# Size", fieldWidth, first)
	} else {
		fmt.Fprintf(w, "# %s", first)
	}
	switch {
	case b.nonblocking && o.Full:
		for _, h := range []string{"Compute(us)", "Coll. Init(us)", "MPI_Test(us)", "MPI_Wait(us)", "Pure Comm.(us)", "Overlap(%)"} {
			fmt.Fprintf(w, "%*s", fieldWidth, h)
		}
	case b.nonblocking:
		for _, h := range []string{"Compute(us)", "Pure Comm.(us)", "Overlap(%)"} {
			fmt.Fprintf(w, "%*s", fieldWidth, h)
		}
	case o.Full:
		fmt.Fprintf(w, "%*s%*s%*s", fieldWidth, "Min Latency(us)", fieldWidth, "Max Latency(us)", 12, "Iterations")
	}
	fmt.Fprintln(w)
}

// Run runs b over c, printing on rank 0.
func (b Collective) Run(ctx context.Context, c *fabric.Comm, o CollOptions, w io.Writer) error {
	if c.Size() < 2 {
		return fmt.Errorf("%s: this test requires at least two processes", b.Name)
	}
	if c.Rank() == 0 {
		b.Header(w, o)
	}
	n := c.Size()
	bufs := &collBufs{send: make([]byte, max(o.MaxSize, 1)*n), recv: make([]byte, max(o.MaxSize, 1)*n)}
	for i := range bufs.send {
		bufs.send[i] = 1
	}
	settle()
	sizes := []int{0}
	if b.sized {
		sizes = o.sizes()
	}
	prog := rank0Progress(c, b.Name)
	defer prog.Done()
	for i, size := range sizes {
		prog.Step(i+1, len(sizes), fmt.Sprintf("%d bytes", size))
		iters, warm := o.counts(size)
		if err := collectives.Barrier(ctx, c); err != nil {
			return err
		}
		lat, err := b.latency(ctx, c, bufs, size, iters, warm)
		if err != nil {
			return fmt.Errorf("%s at %d bytes: %w", b.Name, size, err)
		}
		if !b.nonblocking {
			if err := b.report(ctx, c, w, o, size, iters, lat); err != nil {
				return err
			}
			continue
		}
		if err := b.overlap(ctx, c, w, o, bufs, size, iters, warm, lat); err != nil {
			return fmt.Errorf("%s at %d bytes: %w", b.Name, size, err)
		}
	}
	return nil
}

// latency times start+wait, in µs per operation at this rank: the warm-up
// first, then one clock reading on each side of the timed loop (OSU reads
// the clock around each operation; summed, that is the same time plus
// the clock's own cost, which is several times higher for Go's time.Now
// than for MPI_Wtime — the C comparator times its loop the same way).
func (b Collective) latency(ctx context.Context, c *fabric.Comm, bufs *collBufs, size, iters, warm int) (float64, error) {
	run := func(k int) error {
		for i := 0; i < k; i++ {
			var err error
			if b.call != nil {
				err = b.call(ctx, c, bufs, size)
			} else {
				var r fabric.Request
				if r, err = b.start(c, bufs, size); err == nil {
					_, err = r.Wait(ctx)
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := run(warm); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := run(iters); err != nil {
		return 0, err
	}
	return time.Since(t0).Seconds() * 1e6 / float64(iters), nil
}

// report reduces the latency over ranks (avg, min, max) and prints a row.
func (b Collective) report(ctx context.Context, c *fabric.Comm, w io.Writer, o CollOptions, size, iters int, lat float64) error {
	v := []float64{lat}
	sum, mn, mx := make([]float64, 1), make([]float64, 1), make([]float64, 1)
	for _, x := range []struct {
		out []float64
		op  op.Op[float64]
	}{{sum, op.Sum[float64]()}, {mn, op.Min[float64]()}, {mx, op.Max[float64]()}} {
		if err := collectives.Reduce(ctx, c, v, x.out, x.op, 0); err != nil {
			return err
		}
	}
	if c.Rank() != 0 {
		return nil
	}
	avg := sum[0] / float64(c.Size())
	if b.sized {
		fmt.Fprintf(w, "%-*d%*.*f", 10, size, fieldWidth, 2, avg)
	} else {
		fmt.Fprintf(w, "%*.*f", 17, 2, avg)
	}
	if o.Full {
		fmt.Fprintf(w, "%*.*f%*.*f%*d", fieldWidth, 2, mn[0], fieldWidth, 2, mx[0], 12, iters)
	}
	fmt.Fprintln(w)
	return nil
}

// overlap is OSU's nonblocking measurement: start, compute for as long
// as the pure operation takes (testing -t times), wait.
func (b Collective) overlap(ctx context.Context, c *fabric.Comm, w io.Writer, o CollOptions, bufs *collBufs, size, iters, warm int, lat float64) error {
	target := time.Duration(lat * float64(time.Microsecond))
	var overall, init, comp, test, wait time.Duration
	for i := 0; i < iters+warm; i++ {
		t0 := time.Now()
		r, err := b.start(c, bufs, size)
		if err != nil {
			return err
		}
		t1 := time.Now()
		tt := dummyCompute(target, o.TestCalls, &r)
		t2 := time.Now()
		if _, err := r.Wait(ctx); err != nil {
			return err
		}
		t3 := time.Now()
		if i >= warm {
			overall += t3.Sub(t0)
			init += t1.Sub(t0)
			comp += t2.Sub(t1)
			test += tt
			wait += t3.Sub(t2)
		}
	}
	us := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(iters) }
	vals := []float64{us(overall), us(comp), us(test), us(wait), us(init), lat}
	sums := make([]float64, len(vals))
	if err := collectives.Reduce(ctx, c, vals, sums, op.Sum[float64](), 0); err != nil {
		return err
	}
	if c.Rank() != 0 {
		return nil
	}
	for i := range sums {
		sums[i] /= float64(c.Size())
	}
	ov, cpu, tst, wt, in, comm := sums[0], sums[1], sums[2], sums[3], sums[4], sums[5]
	overlap := math.Max(0, 100-((ov-(cpu-tst))/comm)*100)
	if b.sized {
		fmt.Fprintf(w, "%-*d%*.*f", 10, size, fieldWidth, 2, ov)
	} else {
		fmt.Fprintf(w, "%*.*f", fieldWidth, 2, ov)
	}
	if o.Full {
		fmt.Fprintf(w, "%*.*f%*.*f%*.*f%*.*f%*.*f%*.*f\n", fieldWidth, 2, cpu-tst, fieldWidth, 2, in, fieldWidth, 2, tst, fieldWidth, 2, wt, fieldWidth, 2, comm, fieldWidth, 2, overlap)
	} else {
		fmt.Fprintf(w, "%*.*f%*.*f%*.*f\n", fieldWidth, 2, cpu-tst, fieldWidth, 2, comm, fieldWidth, 2, overlap)
	}
	return nil
}

// dummyCompute computes for d, calling Test on r calls times, evenly
// spread; it returns the time spent in Test.
func dummyCompute(d time.Duration, calls int, r *fabric.Request) time.Duration {
	var tested time.Duration
	start := time.Now()
	next := 0
	x := 1.0001
	for {
		for k := 0; k < 64; k++ {
			x = x*1.0000001 + 1e-9
		}
		el := time.Since(start)
		if calls > 0 && next < calls && el >= d*time.Duration(next)/time.Duration(calls) {
			t := time.Now()
			r.Test()
			tested += time.Since(t)
			next++
		}
		if el >= d {
			break
		}
	}
	runtime.KeepAlive(x) // the loop is the work: keep the compiler from dropping it
	return tested
}

// Names lists every benchmark name: point-to-point, collective, one-sided.
func Names() string {
	var s []string
	for _, b := range Benchmarks {
		s = append(s, b.Name)
	}
	for _, b := range Collectives {
		s = append(s, b.Name)
	}
	for _, b := range OneSidedBenchmarks {
		s = append(s, b.Name)
	}
	return strings.Join(s, " ")
}

// settle lets the Go runtime reach its steady state before anything is
// timed: for its first milliseconds the runtime's monitor thread wakes
// every 20 µs, and with every CPU busy with a rank each wake-up delays one.
// It backs off while the process keeps running, and a thread that wakes
// it from an idle process's deep sleep sets it back to 20 µs — which is
// why a pause by sleeping (as this once was, for the same 30 ms) helped
// less than one by spinning, measured below. Without the pause the first
// size of a run was the slowest in each of five runs of a 2-rank
// 4–16-byte allreduce (by 0.1–0.4 µs). With the sleep, a run starting
// at 16 KiB (100 timed iterations, OSU's count above 8 KiB) took
// 5.1–17.6 µs there in four alternating runs; with the spin, 2.6–7.3.
func settle() {
	for t := time.Now(); time.Since(t) < settleTime; {
	}
}

const settleTime = 30 * time.Millisecond
