//go:build linux && !amd64

package heartbeat

import (
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Independent reports whether the heartbeat runs outside the Go
// scheduler, so that no goroutine can delay it.
const Independent = false

// start runs the heartbeat as a goroutine on a thread of its own.
func (b *Beat) start() error {
	done := make(chan struct{})
	a := b.a
	go func() {
		runtime.LockOSThread()
		atomic.StoreUint32(&a.tid, uint32(unix.Gettid()))
		defer close(done)
		defer atomic.StoreUint32(&a.tid, 0)
		t := time.NewTicker(time.Duration(a.period.Nano()))
		defer t.Stop()
		for atomic.LoadUint32(&a.stop) == 0 {
			for _, f := range a.fences[:a.nf] {
				if atomic.LoadUint64(f) != 0 {
					os.Stderr.Write(a.msg[:a.msgLen])
					os.Exit(int(a.status))
				}
			}
			for _, w := range a.words[:a.n] {
				atomic.AddUint64(w, 1)
			}
			<-t.C
		}
	}()
	b.stop = func() { <-done }
	return nil
}
