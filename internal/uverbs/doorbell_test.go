//go:build linux

package uverbs

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDoorbellRing rings a doorbell aimed at /dev/null (the whole command
// is taken), at an invalid descriptor (EBADF, as an Errno for POST_SEND)
// and at a read-only one (EBADF too), and checks that ringing allocates
// nothing.
func TestDoorbellRing(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	d := DoorbellOnFD(int(null.Fd()))
	if err := d.Ring(); err != nil {
		t.Fatalf("ringing /dev/null: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() { d.Ring() }); n != 0 {
		t.Errorf("Ring allocates %v times", n)
	}

	ro, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for name, fd := range map[string]int{"invalid": -1, "read-only": int(ro.Fd())} {
		err := DoorbellOnFD(fd).Ring()
		var e *Errno
		if !errors.As(err, &e) || e.Cmd != "POST_SEND" || !errors.Is(err, unix.EBADF) {
			t.Errorf("%s descriptor: %v, want a POST_SEND Errno matching EBADF", name, err)
		}
	}
}
