//go:build linux

package hw_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/rivet-hpc/rivet/hw"
)

// Find the GID index to put into a queue pair's address vector for traffic
// from 192.0.2.1 over RoCE v2.
func ExampleGIDByIP() {
	a, err := hw.GIDByIP(net.ParseIP("192.0.2.1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s port %d sgid_index %d (%s)\n", a.Device, a.Port, a.Index, a.GID)
}

// Report ports going down for a minute.
func ExampleWatch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events, err := hw.Watch(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for e := range events {
		if e.Kind == hw.EventPortDown {
			fmt.Printf("%s port %d is %s\n", e.Device, e.Port, e.State)
		}
	}
}
