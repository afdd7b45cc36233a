//go:build linux

package files

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
)

func init() { progs.Add("preallocate-signals", progPreallocateSignals) }

// TestPreallocateSignals: on tmpfs (Linux 6.1) every signal that meets
// fallocate(2) makes it fail with EINTR, undoing its work, and a Go
// program takes signals at any time (the runtime's preemption, a
// profiler's SIGPROF). Preallocate of 64 MiB in /dev/shm completes while
// every thread of rank 0 takes a signal every 200 µs.
func TestPreallocateSignals(t *testing.T) {
	for name, env := range providers(t) {
		t.Run(name, func(t *testing.T) {
			d, err := os.MkdirTemp("/dev/shm", "files-test")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(d)
			progs.OK(t, 2, "preallocate-signals", append(env, "FILES_DIR="+d)...)
		})
	}
}

func progPreallocateSignals(ctx context.Context, ep *fabric.Endpoint) error {
	c := ep.World()
	f, err := Open(ctx, c, filepath.Join(dir(), "prealloc"), ModeCreate|ModeRdWr|ModeDeleteOnClose, Hints{})
	must(err, "create")
	stop := make(chan struct{})
	stormed := make(chan struct{})
	if c.Rank() == 0 {
		go func() {
			defer close(stormed)
			tick := time.NewTicker(200 * time.Microsecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					signalThreads(syscall.SIGURG) // the runtime's own preemption signal
				}
			}
		}()
	} else {
		close(stormed)
	}
	err = f.Preallocate(ctx, 64<<20)
	close(stop)
	<-stormed
	must(err, "preallocate under signals")
	if c.Rank() == 0 {
		st, err := os.Stat(filepath.Join(dir(), "prealloc"))
		must(err, "stat")
		if held := st.Sys().(*syscall.Stat_t).Blocks * 512; st.Size() != 64<<20 || held < 64<<20 {
			failf("after Preallocate(64 MiB): size %d, %d bytes held", st.Size(), held)
		}
	}
	return f.Close(ctx)
}

// signalThreads sends sig to every thread of this process.
func signalThreads(sig syscall.Signal) {
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			syscall.Tgkill(os.Getpid(), tid, sig)
		}
	}
}
