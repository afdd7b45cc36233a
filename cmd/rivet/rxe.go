//go:build linux

package main

import (
	"fmt"
	"io"

	"github.com/rivet-hpc/rivet/hw"
)

func rxeCmd(args []string, stdout io.Writer) error {
	switch {
	case len(args) == 3 && args[0] == "add":
		if err := hw.AddRXE(args[1], args[2]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "added %s on %s\n", args[1], args[2])
		return nil
	case len(args) == 2 && (args[0] == "del" || args[0] == "delete"):
		if err := hw.DeleteRXE(args[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %s\n", args[1])
		return nil
	}
	return fmt.Errorf("usage: rivet rxe add NAME NETDEV | rivet rxe del NAME")
}
