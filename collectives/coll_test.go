//go:build linux

package collectives

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/jobtest"
	"github.com/rivet-hpc/rivet/internal/testutil"
	"github.com/rivet-hpc/rivet/op"
)

const progEnv = "RIVET_COLL_TEST_PROG"

// progs are the programs the tests run as the ranks of a job.
var progs = jobtest.Programs[*fabric.Endpoint]{
	Env:     progEnv,
	Init:    func(ctx context.Context) (*fabric.Endpoint, error) { return fabric.Init(ctx) },
	Close:   (*fabric.Endpoint).Close,
	Rank:    func(ep *fabric.Endpoint) int { return ep.World().Rank() },
	Timeout: 300 * time.Second,
}

func TestMain(m *testing.M) { progs.Main(m) }

// runJob runs prog on n ranks and returns output and status.
func runJob(t *testing.T, n int, prog string, ft bool, env ...string) (string, string, int) {
	t.Helper()
	return progs.Run(t, n, prog, ft, env...)
}

func runOK(t *testing.T, n int, prog string, env ...string) string {
	t.Helper()
	return progs.OK(t, n, prog, env...)
}

// Affine is f(x) = A·x + B mod 1000003; composing them is associative but
// not commutative, which makes rank order visible.
type Affine struct{ A, B int64 }

const mod = 1000003

// then is g∘f applied as "f first, then g": lower ranks first.
func (f Affine) then(g Affine) Affine {
	return Affine{A: g.A * f.A % mod, B: (g.A*f.B + g.B) % mod}
}

var compose = op.New("compose", false, func(in, inout []Affine) {
	for i := range inout {
		inout[i] = in[i].then(inout[i])
	}
})

func ival(rank, i int) int64  { return int64((rank+1)*(i%97) + rank*31 + i%5) }
func aval(rank, i int) Affine { return Affine{A: int64(rank+2+i%3) % mod, B: int64(rank*7+i) % mod} }
func ints(rank, n int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = ival(rank, i)
	}
	return v
}
func affines(rank, n int) []Affine {
	v := make([]Affine, n)
	for i := range v {
		v[i] = aval(rank, i)
	}
	return v
}

func fail(format string, args ...any) error { return fmt.Errorf(format, args...) }

// every algorithm of coll that can serve this call, forced one by one.
func each(coll string, f func(a Algorithm) error) error {
	defer Force(coll, Auto)
	for _, a := range append([]Algorithm{Auto}, algorithms[coll]...) {
		if err := Force(coll, a); err != nil {
			return err
		}
		if err := f(a); err != nil {
			return fmt.Errorf("%s/%s: %w", coll, a, err)
		}
	}
	return nil
}

var sizes = []int{0, 1, 7, 1000, 70000}

func progAll(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	me, n := c.Rank(), c.Size()
	for _, k := range sizes {
		// Barrier.
		if err := each("barrier", func(Algorithm) error { return Barrier(ctx, c) }); err != nil {
			return err
		}
		// Bcast from every root (two at larger sizes, to save time).
		roots := []int{0, n - 1}
		if k < 1000 {
			roots = nil
			for r := 0; r < n; r++ {
				roots = append(roots, r)
			}
		}
		for _, root := range roots {
			err := each("bcast", func(Algorithm) error {
				buf := make([]int64, k)
				if me == root {
					buf = ints(root, k)
				}
				if err := Bcast(ctx, c, buf, root); err != nil {
					return err
				}
				if !slices.Equal(buf, ints(root, k)) {
					return fail("bcast of %d from %d: wrong data", k, root)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		// Sum and compose: the reference folds in rank order.
		sum := make([]int64, k)
		comp := affines(0, k)
		for r := 0; r < n; r++ {
			for i := range sum {
				sum[i] += ival(r, i)
			}
			if r > 0 {
				for i, a := range affines(r, k) {
					comp[i] = comp[i].then(a)
				}
			}
		}
		for _, root := range []int{0, n - 1} {
			err := each("reduce", func(Algorithm) error {
				got := make([]int64, k)
				if err := Reduce(ctx, c, ints(me, k), got, op.Sum[int64](), root); err != nil {
					return err
				}
				if me == root && !slices.Equal(got, sum) {
					return fail("reduce sum of %d to %d: wrong", k, root)
				}
				gotA := make([]Affine, k)
				if err := Reduce(ctx, c, affines(me, k), gotA, compose, root); err != nil {
					return err
				}
				if me == root && !slices.Equal(gotA, comp) {
					return fail("reduce compose of %d to %d: not in rank order", k, root)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		err := each("allreduce", func(Algorithm) error {
			got := make([]int64, k)
			if err := Allreduce(ctx, c, ints(me, k), got, op.Sum[int64]()); err != nil {
				return err
			}
			if !slices.Equal(got, sum) {
				return fail("allreduce sum of %d: wrong", k)
			}
			inplace := ints(me, k)
			if err := Allreduce(ctx, c, nil, inplace, op.Sum[int64]()); err != nil {
				return err
			}
			if !slices.Equal(inplace, sum) {
				return fail("allreduce in place of %d: wrong", k)
			}
			gotA := make([]Affine, k)
			if err := Allreduce(ctx, c, affines(me, k), gotA, compose); err != nil {
				return err
			}
			if !slices.Equal(gotA, comp) {
				return fail("allreduce compose of %d: not in rank order", k)
			}
			return nil
		})
		if err != nil {
			return err
		}
		blk := max(k/16, 1) * min(k, 1) // per-process block: 0 when k is 0
		all := blocks(n, blk)
		for _, root := range []int{0, n - 1} {
			if err := each("gather", func(Algorithm) error {
				got := make([]int64, n*blk)
				if err := Gather(ctx, c, ints(me, blk), got, root); err != nil {
					return err
				}
				if me == root && !slices.Equal(got, all) {
					return fail("gather of %d to %d: wrong", blk, root)
				}
				return nil
			}); err != nil {
				return err
			}
			if err := each("scatter", func(Algorithm) error {
				got := make([]int64, blk)
				var send []int64
				if me == root {
					send = all
				}
				if err := Scatter(ctx, c, send, got, root); err != nil {
					return err
				}
				if !slices.Equal(got, ints(me, blk)) {
					return fail("scatter of %d from %d: wrong", blk, root)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if err := checkAllgather(ctx, c, blk); err != nil {
			return err
		}
		if err := checkAlltoall(ctx, c, blk); err != nil {
			return err
		}
		// Vector forms: rank i's block has i+blk elements.
		counts, displs, tot := make([]int, n), make([]int, n), 0
		for i := range counts {
			counts[i], displs[i] = i+blk, tot
			tot += counts[i]
		}
		allv := make([]int64, 0, tot)
		for r := 0; r < n; r++ {
			allv = append(allv, ints(r, counts[r])...)
		}
		gotv := make([]int64, tot)
		if err := Allgatherv(ctx, c, ints(me, counts[me]), gotv, counts, displs); err != nil || !slices.Equal(gotv, allv) {
			return fail("allgatherv %d: %v", blk, err)
		}
		gotv = make([]int64, tot)
		if err := Gatherv(ctx, c, ints(me, counts[me]), gotv, counts, displs, n-1); err != nil || (me == n-1 && !slices.Equal(gotv, allv)) {
			return fail("gatherv %d: %v", blk, err)
		}
		mine := make([]int64, counts[me])
		if err := Scatterv(ctx, c, allv, counts, displs, mine, 0); err != nil || !slices.Equal(mine, ints(me, counts[me])) {
			return fail("scatterv %d: %v", blk, err)
		}
		if err := each("alltoallv", func(Algorithm) error {
			// Rank i sends j+1 elements to rank j.
			sc, sd, st := make([]int, n), make([]int, n), 0
			rc, rd, rt := make([]int, n), make([]int, n), 0
			for j := 0; j < n; j++ {
				sc[j], sd[j], st = j+1, st, st+j+1
				rc[j], rd[j], rt = me+1, rt, rt+me+1
			}
			send := make([]int64, 0, st)
			for j := 0; j < n; j++ {
				send = append(send, ints(me*n+j, j+1)...)
			}
			got := make([]int64, rt)
			if err := Alltoallv(ctx, c, send, sc, sd, got, rc, rd); err != nil {
				return err
			}
			for i := 0; i < n; i++ {
				if !slices.Equal(got[rd[i]:rd[i]+rc[i]], ints(i*n+me, me+1)) {
					return fail("alltoallv: block from %d wrong", i)
				}
			}
			return nil
		}); err != nil {
			return err
		}
		// Reduce-scatter (block and vector) and scans.
		if err := each("reduce_scatter", func(Algorithm) error {
			rs := make([]int64, blk)
			if err := ReduceScatterBlock(ctx, c, sumInputs(me, n*blk), rs, op.Sum[int64]()); err != nil {
				return err
			}
			want := sumOver(n, n*blk)[me*blk : (me+1)*blk]
			if !slices.Equal(rs, want) {
				return fail("reduce_scatter_block %d: wrong", blk)
			}
			rsv := make([]int64, counts[me])
			if err := ReduceScatter(ctx, c, sumInputs(me, tot), rsv, counts, op.Sum[int64]()); err != nil {
				return err
			}
			if !slices.Equal(rsv, sumOver(n, tot)[displs[me]:displs[me]+counts[me]]) {
				return fail("reduce_scatter %d: wrong", tot)
			}
			rsa := make([]Affine, blk)
			if err := ReduceScatterBlock(ctx, c, affines(me, n*blk), rsa, compose); err != nil {
				return err
			}
			if !slices.Equal(rsa, composeOver(n, n*blk)[me*blk:(me+1)*blk]) {
				return fail("reduce_scatter_block compose %d: not in rank order", blk)
			}
			return nil
		}); err != nil {
			return err
		}
		sc := make([]Affine, k)
		if err := Scan(ctx, c, affines(me, k), sc, compose); err != nil || !slices.Equal(sc, composeOver(me+1, k)) {
			return fail("scan %d: %v", k, err)
		}
		ex := make([]Affine, k)
		if err := Exscan(ctx, c, affines(me, k), ex, compose); err != nil || (me > 0 && !slices.Equal(ex, composeOver(me, k))) {
			return fail("exscan %d: %v", k, err)
		}
	}
	return nil
}

func sumInputs(rank, k int) []int64 { return ints(rank, k) }

// blocks is every rank's blk-element block, in rank order.
func blocks(n, blk int) []int64 {
	all := make([]int64, 0, n*blk)
	for r := 0; r < n; r++ {
		all = append(all, ints(r, blk)...)
	}
	return all
}

// checkAllgather runs Allgather of blk elements with every algorithm.
func checkAllgather(ctx context.Context, c *fabric.Comm, blk int) error {
	n, all := c.Size(), blocks(c.Size(), blk)
	return each("allgather", func(Algorithm) error {
		got := make([]int64, n*blk)
		if err := Allgather(ctx, c, ints(c.Rank(), blk), got); err != nil {
			return err
		}
		if !slices.Equal(got, all) {
			return fail("allgather of %d: wrong", blk)
		}
		return nil
	})
}

// checkAlltoall runs Alltoall of blk elements per block with every
// algorithm; block j of rank i's send is ival(i*n+j, ·).
func checkAlltoall(ctx context.Context, c *fabric.Comm, blk int) error {
	me, n := c.Rank(), c.Size()
	return each("alltoall", func(Algorithm) error {
		send := make([]int64, 0, n*blk)
		for j := 0; j < n; j++ {
			send = append(send, ints(me*n+j, blk)...)
		}
		got := make([]int64, n*blk)
		if err := Alltoall(ctx, c, send, got); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if !slices.Equal(got[i*blk:(i+1)*blk], ints(i*n+me, blk)) {
				return fail("alltoall of %d: block from %d wrong", blk, i)
			}
		}
		return nil
	})
}

func sumOver(n, k int) []int64 {
	s := make([]int64, k)
	for r := 0; r < n; r++ {
		for i := range s {
			s[i] += ival(r, i)
		}
	}
	return s
}

// composeOver folds ranks 0…n-1's affines in order.
func composeOver(n, k int) []Affine {
	out := affines(0, k)
	for r := 1; r < n; r++ {
		for i, a := range affines(r, k) {
			out[i] = out[i].then(a)
		}
	}
	return out
}

func init() { progs.Add("all", progAll) }

func TestEveryCollective(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { runOK(t, n, "all") })
	}
}

// TestOverVerbs runs every collective with every algorithm over the verbs
// provider (all peers over RDMA), on a size that is a power of two and
// one that is not.
func TestOverVerbs(t *testing.T) {
	devs := testutil.RXEDevices(t)
	for _, n := range []int{2, 3, 4, 7, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			runOK(t, n, "all", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+strings.Join(devs, ","))
		})
	}
}
