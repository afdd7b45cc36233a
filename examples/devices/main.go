//go:build linux

// Devices lists the RDMA devices and, for each RoCE port, the GID a queue
// pair over RoCE v2 with IPv4 would use as its source (sgid_index).
//
//	go run ./examples/devices
//	go run ./cmd/rxevm -topology rxe2 go run ./examples/devices
package main

import (
	"fmt"
	"log"

	"github.com/rivet-hpc/rivet/hw"
)

func main() {
	devs, err := hw.Devices()
	if err != nil {
		log.Printf("some attributes could not be read: %v", err)
	}
	if len(devs) == 0 {
		if perr := hw.HaveUverbs(); perr != nil {
			log.Fatal(perr)
		}
		log.Fatal("no RDMA devices")
	}
	for _, d := range devs {
		for _, p := range d.Ports {
			fmt.Printf("%s port %d: %s, MTU %s, netdev %q\n", d.Name, p.Number, p.State, p.ActiveMTU, p.Netdev)
			if p.Netdev == "" {
				continue
			}
			if g, err := hw.GIDByNetdev(p.Netdev); err == nil {
				fmt.Printf("  RoCE v2 source GID: index %d, %s\n", g.Index, g.GID)
			}
		}
	}
}
