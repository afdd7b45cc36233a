//go:build linux

// Command rmaloop runs Rivet's 8-byte one-sided operations in a passive-
// target epoch (LockAll, then the operation and a Flush, again and
// again) between marks of the insncount QEMU plugin, for
// lab/insncount.sh: the counts then cover the loop alone, not the
// start-up and the waits around it, which vary from run to run.
//
//	rivetrun -n 2 -bind-to core rmaloop -ops put,get,fop,cas,acc -n1 2000 -n2 12000
//
// Rank 0 issues, to rank 1. For each operation it runs a warm-up, then
// n1 and n2 iterations, each marked before and after, and prints a line
// "SECTION rmaloop OP 8 N" for each marked run, as the script's own
// marked runs do. The marker is a page at the address of the plugin's
// marker program (lab/qemu/mark.c) holding one return instruction,
// which rank 0 calls.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
	"github.com/rivet-hpc/rivet/rma"
)

// markAddr is where the plugin looks for its marker (MARK_LO in
// lab/qemu/insncount.c).
const markAddr = 0x13370000

func main() {
	ops := flag.String("ops", "put,get,fop,cas,acc", "the `operations` to run, in order")
	n1 := flag.Int("n1", 2000, "iterations of the first marked run")
	n2 := flag.Int("n2", 12000, "iterations of the second marked run")
	warm := flag.Int("x", 200, "warm-up iterations")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run(ctx, strings.Split(*ops, ","), *warm, *n1, *n2); err != nil {
		log.Fatal("rmaloop: ", err)
	}
}

func run(ctx context.Context, ops []string, warm, n1, n2 int) error {
	ep, err := fabric.Init(ctx)
	if err != nil {
		return err
	}
	defer ep.Close()
	c := ep.World()
	if c.Size() != 2 {
		return fmt.Errorf("run 2 ranks, not %d", c.Size())
	}
	w, err := rma.Allocate(ctx, c, 64, 1, rma.Info{})
	if err != nil {
		return err
	}
	if c.Rank() == 0 {
		if err := issue(ctx, ep, w, ops, warm, n1, n2); err != nil {
			return err
		}
	}
	if err := collectives.Barrier(ctx, c); err != nil {
		return err
	}
	return w.Free(ctx)
}

// issue runs the loops at rank 0.
func issue(ctx context.Context, ep *fabric.Endpoint, w *rma.Window, ops []string, warm, n1, n2 int) error {
	mark, err := marker()
	if err != nil {
		return err
	}
	buf, err := ep.AllocMem(8)
	if err != nil {
		return err
	}
	defer ep.FreeMem(buf)
	src := unsafe.Slice((*int64)(unsafe.Pointer(&buf[0])), 1)
	if err := w.LockAll(ctx, 0); err != nil {
		return err
	}
	for _, name := range ops {
		do, ok := map[string]func() error{
			"put": func() error { return rma.Put(ctx, w, buf, 1, 0) },
			"get": func() error { return rma.Get(ctx, w, buf, 1, 8) },
			"fop": func() error {
				_, err := rma.FetchAndOp(ctx, w, int64(1), 1, 16, op.Sum[int64]())
				return err
			},
			"cas": func() error {
				_, err := rma.CompareAndSwap(ctx, w, int64(0), int64(0), 1, 24)
				return err
			},
			"acc": func() error { return rma.Accumulate(ctx, w, src, 1, 32, op.Sum[int64]()) },
		}[name]
		if !ok {
			return fmt.Errorf("unknown operation %q (put, get, fop, cas, acc)", name)
		}
		loop := func(n int) error {
			for range n {
				if err := do(); err != nil {
					return err
				}
				if err := w.Flush(ctx, 1); err != nil {
					return err
				}
			}
			return nil
		}
		if err := loop(warm); err != nil {
			return err
		}
		for _, n := range []int{n1, n2} {
			mark()
			err := loop(n)
			mark()
			if err != nil {
				return err
			}
			fmt.Printf("SECTION rmaloop %s 8 %d\n", name, n)
		}
	}
	return w.UnlockAll(ctx)
}

// marker maps the marker page and returns a function that calls it.
// The page is a memory file's, written before it is mapped, so that
// nothing here writes through an address made from a number.
func marker() (func(), error) {
	fd, err := unix.MemfdCreate("rmaloop-mark", 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	page := os.Getpagesize()
	if _, err := unix.Write(fd, []byte{0xc3}); err != nil { // ret
		return nil, err
	}
	if err := unix.Ftruncate(fd, int64(page)); err != nil {
		return nil, err
	}
	_, _, errno := unix.Syscall6(unix.SYS_MMAP, markAddr, uintptr(page), unix.PROT_READ|unix.PROT_EXEC,
		unix.MAP_PRIVATE|unix.MAP_FIXED_NOREPLACE, uintptr(fd), 0)
	if errno != 0 {
		return nil, fmt.Errorf("mapping the marker page at %#x: %w", markAddr, errno)
	}
	// A func value points at a word holding the code's address.
	code := uintptr(markAddr)
	fv := &code
	return *(*func())(unsafe.Pointer(&fv)), nil
}
