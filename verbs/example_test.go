//go:build linux

package verbs_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/verbs"
)

// A device that is not there is an error matching hw.ErrNotFound; one
// this build cannot drive matches verbs.ErrNotSupported.
func ExampleOpen() {
	_, err := verbs.Open("no-such-rdma-device")
	fmt.Println(errors.Is(err, hw.ErrNotFound))
	// Output: true
}

// The objects of an RC connection, from the first device with an active
// port: a protection domain, registered memory, a completion queue and a
// queue pair, each closed in turn. It needs an RDMA device: run it under
// rxevm (docs/rxevm.md). examples/rc_pingpong connects two such queue
// pairs and moves messages between them.
func Example() {
	dev, err := verbs.Open("")
	if err != nil {
		log.Fatal(err) // no device: errors.Is(err, hw.ErrNotFound) or ErrNotSupported
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	defer pd.Close()
	mr, err := pd.Alloc(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	cq, err := dev.NewCQ(verbs.CQConfig{Size: 16})
	if err != nil {
		log.Fatal(err)
	}
	defer cq.Close()
	qp, err := pd.NewQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 8, MaxRecvWR: 8, Port: 1,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite})
	if err != nil {
		log.Fatal(err)
	}
	defer qp.Close()
	fmt.Printf("%s: queue pair %d over %d registered bytes\n", dev.Name(), qp.QPN(), len(mr.Bytes()))
}
