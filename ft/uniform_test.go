//go:build linux

package ft

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
)

func init() { progs.Add("uniform", progUniform) }

// progUniform: with error uniformity coll, the last rank dies at the
// 5th round of a series (a leaf of the broadcast's tree: members away
// from it would finish the bcast). Each round is a bcast on d and, on d2,
// a nonblocking bcast and barrier that the ranks complete in different
// orders (Wait one way or the other, or Test). Every survivor raises at
// the same round — the 5th — in each, and prints it; then, with
// uniformity create, the survivors' Dup raises alike.
func progUniform(ctx context.Context, ep *fabric.Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	defer startDetector(ctx, ep)()
	t0 := time.Now()
	d, err := w.Dup(ctx)
	must(err, "dup")
	must(d.SetInfo(fabric.InfoErrorUniform, "coll"), "set mpi_error_uniform=coll")
	if v, _ := d.Info(fabric.InfoErrorUniform); v != "coll" {
		failf("mpi_error_uniform is %q", v)
	}
	d2, err := d.Dup(ctx)
	must(err, "dup d")
	must(d2.SetErrorUniform(fabric.UniformColl), "set uniformity coll on d2")
	buf, nbuf := make([]byte, 64), make([]byte, 64)
	first, nbFirst, barFirst := -1, -1, -1
	for i := 0; i < 10 && (first < 0 || nbFirst < 0 || barFirst < 0); i++ {
		if me == n-1 && i == 5 {
			die()
		}
		rb, err := collectives.Ibcast(d2, nbuf, 0)
		must(err, "ibcast")
		rs, err := collectives.Ibarrier(d2)
		must(err, "ibarrier")
		if first < 0 {
			if err := collectives.Bcast(ctx, d, buf, 0); err != nil {
				if !errors.Is(err, fabric.ErrProcFailed) {
					failf("bcast %d: %v", i, err)
				}
				first = i
			}
		}
		var berr, serr error
		switch me % 3 {
		case 0:
			_, berr = rb.Wait(ctx)
			_, serr = rs.Wait(ctx)
		case 1: // the other way round
			_, serr = rs.Wait(ctx)
			_, berr = rb.Wait(ctx)
		case 2:
			for done := false; !done; {
				_, done, berr = rb.Test()
			}
			serr = fabric.WaitAll(ctx, []fabric.Request{rs}, nil)
		}
		for _, x := range []struct {
			err   error
			first *int
			what  string
		}{{berr, &nbFirst, "ibcast"}, {serr, &barFirst, "ibarrier"}} {
			if x.err == nil || *x.first >= 0 {
				continue
			}
			if !errors.Is(x.err, fabric.ErrProcFailed) {
				failf("%s %d: %v", x.what, i, x.err)
			}
			*x.first = i
		}
	}
	fmt.Printf("agreed first-error %d ibcast %d ibarrier %d\n", first, nbFirst, barFirst)
	// Creation: every survivor's Dup raises (a member failed,
	// unacknowledged), and none keeps a communicator.
	must(w.SetErrorUniform(fabric.UniformCreate), "set uniformity create")
	x, err := w.Dup(ctx)
	if err == nil || x != nil {
		failf("dup with a failed member under uniformity create: %v, %v", x, err)
	}
	fmt.Printf("shrunk dup-error %s\n", errClass(err))
	must(w.SetErrorUniform(fabric.UniformLocal), "set uniformity local")
	// Bounded by what the mechanism needs: detection (pidfd, or the
	// detector's timeout) and a few agreements.
	if took := time.Since(t0); took > 20*time.Second {
		failf("the bcasts and the dup took %v", took)
	}
	return nil
}

// TestUniform: the error-uniformity keys, coll and create, with a rank
// killed during a bcast: every survivor raises at the same operation,
// blocking or not.
func TestUniform(t *testing.T) {
	for _, way := range ways(t) {
		for _, n := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/%d", way.name, n), func(t *testing.T) {
				out, _, _ := progs.Run(t, n, "uniform", true, way.env...)
				sameEverywhere(t, out, n-1)
				if want := "agreed first-error 5 ibcast 5 ibarrier 5"; !regexp.MustCompile(want).MatchString(out) {
					t.Fatalf("survivors did not raise at bcast 5:\n%s", out)
				}
			})
		}
	}
}
