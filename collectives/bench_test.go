//go:build linux

package collectives

import (
	"context"
	"testing"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

// BenchmarkOverhead measures what a collective costs beyond its
// messages: on a job of one process every collective is its schedule
// alone.
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	c := ep.World()
	x, y := make([]byte, 8), make([]byte, 8)
	b.Run("barrier", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := Barrier(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("allreduce8", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := Allreduce(ctx, c, x, y, op.Sum[byte]()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
