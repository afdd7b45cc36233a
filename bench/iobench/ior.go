//go:build linux

// Package iobench is rivet bench io: IOR's access patterns over package
// files, printing IOR's summary (its lab twin, lab/io.c, runs the same
// pattern over MPI-IO).
package iobench

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/files"
	"github.com/rivet-hpc/rivet/internal/progress"
	"github.com/rivet-hpc/rivet/op"
)

// Options are IOR's, by its flag names.
type Options struct {
	Block       int64  // -b: each process's contiguous bytes per segment
	Transfer    int64  // -t: bytes per call
	Segments    int    // -s
	FilePerProc bool   // -F: a file per process (path.<rank>)
	Collective  bool   // -c: collective calls (WriteAtAll, ReadAtAll)
	View        bool   // -V: a block-cyclic view, so one call covers Transfer/Block interleaved blocks
	Path        string // -o
	Reps        int    // -i
	Write, Read bool   // -w, -r (neither: both)
	Keep        bool   // -k: keep the file
	Hints       files.Hints
}

// Parse reads IOR's flags (and -cb, -aggs, -cbsize for the hints).
func Parse(args []string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("rivet bench io", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := fs.String("b", "1m", "block `size` per process per segment (k, m, g suffixes)")
	t := fs.String("t", "1m", "transfer `size`: the bytes of one call")
	fs.IntVar(&o.Segments, "s", 1, "segments")
	fs.BoolVar(&o.FilePerProc, "F", false, "a file per process")
	fs.BoolVar(&o.Collective, "c", false, "collective calls")
	fs.BoolVar(&o.View, "V", false, "a block-cyclic file view: one call covers transfer/block interleaved blocks")
	fs.StringVar(&o.Path, "o", "/dev/shm/rivet-ior.dat", "the test file's `path`")
	fs.IntVar(&o.Reps, "i", 1, "repetitions")
	fs.BoolVar(&o.Write, "w", false, "write (with neither -w nor -r: both)")
	fs.BoolVar(&o.Read, "r", false, "read")
	fs.BoolVar(&o.Keep, "k", false, "keep the file")
	cb := fs.String("cb", "automatic", "collective buffering: enable, disable, automatic")
	fs.IntVar(&o.Hints.Aggregators, "aggs", 0, "aggregators (cb_nodes; 0: the default)")
	fs.IntVar(&o.Hints.BufferSize, "cbsize", 0, "aggregator buffer `bytes` (cb_buffer_size; 0: the default)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.Block, err = size(*b); err == nil {
		o.Transfer, err = size(*t)
	}
	if err == nil {
		o.Hints, err = mergeHints(o.Hints, *cb)
	}
	switch {
	case err != nil:
	case fs.NArg() > 0:
		err = fmt.Errorf("arguments %q", fs.Args())
	case o.Block <= 0 || o.Transfer <= 0 || o.Segments < 1 || o.Reps < 1:
		err = fmt.Errorf("-b %d, -t %d, -s %d, -i %d: all must be positive", o.Block, o.Transfer, o.Segments, o.Reps)
	case !o.View && o.Block%o.Transfer != 0:
		err = fmt.Errorf("-b %d is not a multiple of -t %d", o.Block, o.Transfer)
	case o.View && (o.Transfer%o.Block != 0 || o.Block*int64(o.Segments)%o.Transfer != 0):
		err = fmt.Errorf("-V: -t %d must be a multiple of -b %d, and divide -b × -s", o.Transfer, o.Block)
	case o.View && o.FilePerProc:
		err = errors.New("-V and -F: a view interleaves processes in one file")
	}
	if err != nil {
		return o, fmt.Errorf("rivet bench io: %w", err)
	}
	if !o.Write && !o.Read {
		o.Write, o.Read = true, true
	}
	return o, nil
}

func mergeHints(h files.Hints, cb string) (files.Hints, error) {
	p, err := files.ParseHints(map[string]string{"romio_cb_write": cb})
	h.Buffering = p.Buffering
	return h, err
}

func size(s string) (int64, error) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult, s = 1<<10, s[:n-1]
		case 'm', 'M':
			mult, s = 1<<20, s[:n-1]
		case 'g', 'G':
			mult, s = 1<<30, s[:n-1]
		}
	}
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil {
		return 0, fmt.Errorf("size %q", s)
	}
	return v * mult, nil
}

// calls lists this process's accesses, in order, as offsets in its view.
func (o *Options) calls(n, r int) []int64 {
	var out []int64
	if o.View {
		for v := int64(0); v < o.Block*int64(o.Segments); v += o.Transfer {
			out = append(out, v)
		}
		return out
	}
	for s := range int64(o.Segments) {
		base := s * o.Block
		if !o.FilePerProc {
			base = (s*int64(n) + int64(r)) * o.Block
		}
		for k := int64(0); k < o.Block; k += o.Transfer {
			out = append(out, base+k)
		}
	}
	return out
}

// stamp writes into the buffer of a call at view offset off what a
// check expects there: at each 4 KiB of the view, the rank and the
// position.
func stamp(buf []byte, r int, off int64) {
	for j := (4096 - off%4096) % 4096; j+8 <= int64(len(buf)); j += 4096 {
		binary.LittleEndian.PutUint64(buf[j:], uint64(r)<<48|uint64(off+j))
	}
}

func check(buf []byte, r int, off int64) error {
	for j := (4096 - off%4096) % 4096; j+8 <= int64(len(buf)); j += 4096 {
		if got, want := binary.LittleEndian.Uint64(buf[j:]), uint64(r)<<48|uint64(off+j); got != want {
			return fmt.Errorf("rank %d: byte %d of its view holds %#x, want %#x", r, off+j, got, want)
		}
	}
	return nil
}

// Run runs the benchmark on w's processes and prints IOR's summary.
func Run(ctx context.Context, w *fabric.Comm, o Options, out io.Writer) error {
	n, me := w.Size(), w.Rank()
	comm := w
	if o.FilePerProc {
		c, err := w.Split(ctx, me, 0)
		if err != nil {
			return err
		}
		defer c.Free()
		comm = c
	}
	path := o.Path
	if o.FilePerProc {
		path = fmt.Sprintf("%s.%d", o.Path, me)
	}
	buf, err := w.Endpoint().AllocMem(int(o.Transfer))
	if err != nil {
		return err
	}
	defer w.Endpoint().FreeMem(buf)
	clear(buf) // (touched before the timing, as the C twin's memset does)
	calls := o.calls(n, me)
	total := float64(o.Block) * float64(o.Segments) * float64(n)
	if me == 0 {
		api := "rivet files (independent)"
		if o.Collective {
			api = "rivet files (collective, " + o.Hints.Buffering.String() + ")"
		}
		layout := "shared file"
		if o.FilePerProc {
			layout = "file per process"
		}
		if o.View {
			layout += ", block-cyclic view"
		}
		fmt.Fprintf(out, "# rivet bench io: %d tasks, %s, %s; block %d, transfer %d, segments %d, aggregate %.0f MiB\n",
			n, layout, api, o.Block, o.Transfer, o.Segments, total/(1<<20))
		fmt.Fprintf(out, "%-9s %10s %10s %6s\n", "access", "bw(MiB/s)", "total(s)", "iter")
	}
	var results [2][]float64 // write, read: MiB/s per repetition
	var prog *progress.Line
	if me == 0 {
		prog = progress.New(os.Stderr, "io")
	}
	defer prog.Done()
	for rep := range o.Reps {
		for k, write := range []bool{true, false} {
			if write && !o.Write || !write && !o.Read {
				continue
			}
			prog.Step(rep+1, o.Reps, [2]string{"write", "read"}[k])
			sec, err := phase(ctx, w, comm, path, o, write, calls, buf)
			if err != nil {
				return err
			}
			bw := total / (1 << 20) / sec
			results[k] = append(results[k], bw)
			if me == 0 {
				fmt.Fprintf(out, "%-9s %10.2f %10.4f %6d\n", [2]string{"write", "read"}[k], bw, sec, rep)
			}
		}
		// Check every byte's stamp, untimed.
		if o.Read {
			if err := verify(ctx, comm, path, o, calls, buf, me); err != nil {
				return err
			}
		}
	}
	if !o.Keep && me == 0 && !o.FilePerProc {
		os.Remove(path)
	}
	if !o.Keep && o.FilePerProc {
		os.Remove(path)
	}
	if me == 0 {
		fmt.Fprintf(out, "\nSummary of all tests:\n%-9s %10s %10s %10s %10s %7s %6s %9s %9s %9s %s\n",
			"Operation", "Max(MiB)", "Min(MiB)", "Mean(MiB)", "StdDev", "#Tasks", "segcnt", "blksiz", "xsize", "aggs(MiB)", "API")
		for k, name := range []string{"write", "read"} {
			if r := results[k]; len(r) > 0 {
				mean, sd := stats(r)
				fmt.Fprintf(out, "%-9s %10.2f %10.2f %10.2f %10.2f %7d %6d %9d %9d %9.0f %s\n",
					name, slices.Max(r), slices.Min(r), mean, sd, n, o.Segments, o.Block, o.Transfer, total/(1<<20), "RIVET")
			}
		}
	}
	return nil
}

func stats(v []float64) (mean, sd float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	for _, x := range v {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(v)))
}

// open opens the test file as a phase does: created for writing.
func open(ctx context.Context, comm *fabric.Comm, path string, o Options, write bool) (*files.File, error) {
	mode := files.ModeRdOnly
	if write {
		mode = files.ModeCreate | files.ModeWrOnly
	}
	f, err := files.Open(ctx, comm, path, mode, o.Hints)
	if err != nil {
		return nil, err
	}
	if o.View {
		ft, err := files.BlockCyclic(o.Block, int64(comm.Size()), int64(comm.Rank()))
		if err == nil {
			err = f.SetView(ctx, 0, 1, ft)
		}
		if err != nil {
			f.Close(ctx)
			return nil, err
		}
	}
	return f, nil
}

// phase times one write or read of the whole pattern, open to close,
// from the first process's start to the last one's end (as IOR).
func phase(ctx context.Context, w, comm *fabric.Comm, path string, o Options, write bool, calls []int64, buf []byte) (float64, error) {
	if err := collectives.Barrier(ctx, w); err != nil {
		return 0, err
	}
	start := time.Now()
	f, err := open(ctx, comm, path, o, write)
	if err != nil {
		return 0, err
	}
	for _, off := range calls {
		var n int
		switch {
		case write && o.Collective:
			stamp(buf, w.Rank(), off)
			n, err = f.WriteAtAll(ctx, off, buf)
		case write:
			stamp(buf, w.Rank(), off)
			n, err = f.WriteAt(off, buf)
		case o.Collective:
			n, err = f.ReadAtAll(ctx, off, buf)
		default:
			n, err = f.ReadAt(off, buf)
		}
		if err == nil && n != len(buf) {
			err = fmt.Errorf("%d bytes of %d", n, len(buf))
		}
		if err != nil {
			f.Close(ctx)
			return 0, err
		}
	}
	if err := f.Close(ctx); err != nil {
		return 0, err
	}
	mine := []float64{time.Since(start).Seconds()}
	worst := []float64{0}
	if err := collectives.Allreduce(ctx, w, mine, worst, op.Max[float64]()); err != nil {
		return 0, err
	}
	return worst[0], nil
}

// verify reads the file back and checks every stamp.
func verify(ctx context.Context, comm *fabric.Comm, path string, o Options, calls []int64, buf []byte, me int) error {
	f, err := open(ctx, comm, path, o, false)
	if err != nil {
		return err
	}
	defer f.Close(ctx)
	for _, off := range calls {
		clear(buf)
		if _, err := f.ReadAt(off, buf); err != nil {
			return err
		}
		if err := check(buf, me, off); err != nil {
			return err
		}
	}
	return nil
}
