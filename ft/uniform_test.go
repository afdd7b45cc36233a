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
// 5th bcast of a series (a leaf of the broadcast's tree: members away
// from it would finish the bcast). Every survivor raises at the same
// bcast — the 5th — and prints it; then, with uniformity create, the
// survivors' Dup raises alike. A nonblocking collective is refused.
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
	if _, err := collectives.Ibcast(d, []byte{0}, 0); !errors.Is(err, fabric.ErrNotSupported) {
		failf("a nonblocking bcast on a coll-uniform communicator: %v", err)
	}
	buf := make([]byte, 64)
	first := -1
	for i := 0; i < 10; i++ {
		if me == n-1 && i == 5 {
			die()
		}
		if err := collectives.Bcast(ctx, d, buf, 0); err != nil {
			if !errors.Is(err, fabric.ErrProcFailed) {
				failf("bcast %d: %v", i, err)
			}
			first = i
			break
		}
	}
	fmt.Printf("agreed first-error %d\n", first)
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
// killed during a bcast: every survivor raises at the same operation.
func TestUniform(t *testing.T) {
	for _, way := range ways(t) {
		for _, n := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/%d", way.name, n), func(t *testing.T) {
				out, _, _ := progs.Run(t, n, "uniform", true, way.env...)
				sameEverywhere(t, out, n-1)
				if want := "agreed first-error 5"; !regexp.MustCompile(want).MatchString(out) {
					t.Fatalf("survivors did not raise at bcast 5:\n%s", out)
				}
			})
		}
	}
}
