//go:build linux

package files_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/files"
)

// Write a distributed array collectively, each process's elements in
// turn (block-cyclic), and read it back (here, a job of one).
func Example() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	comm := ep.World()

	dir, err := os.MkdirTemp("", "files-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	f, err := files.Open(ctx, comm, filepath.Join(dir, "array"), files.ModeCreate|files.ModeRdWr, files.Hints{})
	if err != nil {
		log.Fatal(err)
	}
	ft, err := files.BlockCyclic(2, int64(comm.Size()), int64(comm.Rank()))
	if err != nil {
		log.Fatal(err)
	}
	if err := f.SetView(ctx, 0, 8, ft); err != nil { // 8-byte elements, two per block
		log.Fatal(err)
	}
	x := []float64{1, 2, 3, 4}
	if _, err := f.WriteAtAll(ctx, 0, files.Bytes(x)); err != nil {
		log.Fatal(err)
	}
	y := make([]float64, len(x))
	if _, err := f.ReadAtAll(ctx, 0, files.Bytes(y)); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(y)
	// Output: [1 2 3 4]
}
