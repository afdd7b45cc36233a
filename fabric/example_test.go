//go:build linux

package fabric_test

import (
	"context"
	"fmt"
	"log"

	"github.com/rivet-hpc/rivet/fabric"
)

// Join the job, and send a message — here to this process itself, as a
// job of one would; under rivetrun, Hydra or srun, any rank works alike.
func Example() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	w := ep.World()

	if err := w.Send(ctx, []byte("hello"), w.Rank(), 7); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 16)
	st, err := w.Recv(ctx, buf, fabric.AnySource, fabric.AnyTag)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of %d got %q from %d, tag %d\n", w.Rank(), w.Size(), buf[:st.Count], st.Source, st.Tag)
	// Output: 0 of 1 got "hello" from 0, tag 7
}

// Nonblocking requests are values, completed by Wait, Test or WaitAll.
func ExampleWaitAll() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	w := ep.World()

	in := make([]float64, 3)
	reqs := make([]fabric.Request, 2)
	reqs[0], _ = fabric.IrecvSlice(w, in, 0, 1)
	reqs[1], _ = fabric.IsendSlice(w, []float64{1.5, 2.5, 3.5}, 0, 1)
	sts := make([]fabric.Status, 2)
	if err := fabric.WaitAll(ctx, reqs, sts); err != nil {
		log.Fatal(err)
	}
	fmt.Println(in, fabric.Count[float64](sts[0]), reqs[0].IsNull())
	// Output: [1.5 2.5 3.5] 3 true
}

// One-sided operations: a process exposes memory from AllocMem, a peer
// writes into it and adds to a counter in it, and Flush completes both.
// (It needs peers reached over verbs: run it under rivetrun with
// RIVET_PROVIDER=verbs on an RDMA device.)
func ExampleEndpoint_Put() {
	ctx := context.Background()
	ep, err := fabric.Init(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	w := ep.World()

	mem, err := ep.AllocMem(4096)
	if err != nil {
		log.Fatal(err)
	}
	defer ep.FreeMem(mem)
	if w.Rank() == 0 {
		key, err := ep.Expose(mem)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := key.MarshalBinary()
		if err := w.Send(ctx, b, 1, 0); err != nil {
			log.Fatal(err)
		}
		// Rank 1 says when it is done.
		if _, err := w.Recv(ctx, nil, 1, 1); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%q, counter %d\n", mem[8:13], mem[0])
	} else if w.Rank() == 1 {
		b := make([]byte, fabric.RemoteMemSize)
		if _, err := w.Recv(ctx, b, 0, 0); err != nil {
			log.Fatal(err)
		}
		var key fabric.RemoteMem
		if err := key.UnmarshalBinary(b); err != nil {
			log.Fatal(err)
		}
		var old uint64
		if err := ep.Put(ctx, 0, key, 8, []byte("hello")); err != nil {
			log.Fatal(err)
		}
		if err := ep.FetchAndAdd(ctx, 0, key, 0, 1, &old); err != nil {
			log.Fatal(err)
		}
		if err := ep.Flush(ctx, 0); err != nil {
			log.Fatal(err)
		}
		if err := w.Send(ctx, nil, 0, 1); err != nil {
			log.Fatal(err)
		}
	}
}
