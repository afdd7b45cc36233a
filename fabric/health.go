//go:build linux

package fabric

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/hw"
)

// health watches the processes on this node through pidfds: a pidfd
// becomes readable when its process exits, however it exits, so a
// SIGKILLed peer is noticed at the next scan (every millisecond while a
// call waits). A peer that set its segment's closed word exited on
// purpose; any other exit is a failure.
type health struct {
	pfds  []unix.PollFd
	world []int     // world rank per pfd; -1 for bye's socket
	bye   *goodbyes // nil unless peers here are reached over verbs
	gone  []int     // world ranks that had exited before their pidfd could be opened
	exits []int     // scratch: the exits a check judges
}

// newHealth watches the processes local (with these pids) of this node;
// bye, if not nil, hears which of them close on purpose.
func newHealth(local []int, pids []int, me int, bye *goodbyes) *health {
	h := &health{bye: bye}
	for i, w := range local {
		if w == me {
			continue
		}
		fd, err := unix.PidfdOpen(pids[i], 0)
		if err == unix.ESRCH {
			// It exited, and was reaped, before this process got here —
			// a peer that closes as soon as Init returns can, on a slow
			// machine. Judged at the first check, as a pidfd that fired.
			h.gone = append(h.gone, w)
			continue
		}
		if err != nil {
			// No pidfd (old kernel, other pid namespace): this peer's
			// failure is learned from the launcher or its errors instead.
			continue
		}
		unix.CloseOnExec(fd)
		h.pfds = append(h.pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		h.world = append(h.world, w)
	}
	if bye != nil {
		h.pfds = append(h.pfds, unix.PollFd{Fd: int32(bye.fd), Events: unix.POLLIN})
		h.world = append(h.world, -1)
	}
	return h
}

// pollNow is poll(2) with a zero timeout, which never blocks: a raw
// system call, as the doorbell is. Through unix.Poll it allocated its
// timeout, and it entered the scheduler's syscall state, in which the
// runtime's monitor thread may take the P from a goroutine that has run
// for 10 ms — as a waiting rank's has — and hand it off; that cost two
// thread switches and put the monitor back to waking every 20 µs
// (measured under emulation).
func pollNow(fds []unix.PollFd) (int, error) {
	var zero unix.Timespec
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func (h *health) check(e *engine) {
	h.exits = append(h.exits[:0], h.gone...)
	h.gone = nil
	if len(h.pfds) > 0 {
		if n, err := pollNow(h.pfds); err == nil && n > 0 {
			for i := range h.pfds {
				if h.pfds[i].Revents&unix.POLLIN != 0 && h.pfds[i].Fd >= 0 && h.world[i] >= 0 {
					unix.Close(int(h.pfds[i].Fd))
					h.pfds[i].Fd = -1 // poll ignores negative fds
					h.exits = append(h.exits, h.world[i])
				}
			}
		}
	}
	if len(h.exits) == 0 {
		return
	}
	if h.bye != nil {
		// Every goodbye sent before an exit seen here is queued by now,
		// whether or not the poll caught the socket readable.
		h.bye.drain()
	}
	// Failures first, then clean exits: a process that closed right after
	// a collective failed under it must not hide the failure behind its
	// own, unremarkable, exit.
	for pass := 0; pass < 2; pass++ {
		for _, w := range h.exits {
			closed := e.route[w] != nil && e.route[w].closed(w) || h.bye != nil && h.bye.said[w]
			switch {
			case closed != (pass == 1):
			case closed:
				e.markFailed(w, fmt.Errorf("%w: world rank %d closed its endpoint", ErrClosed, w))
			default:
				e.markFailed(w, procFailed("world rank %d exited (seen through its pidfd)", w))
			}
		}
	}
}

func (h *health) close() {
	for i, p := range h.pfds {
		if p.Fd >= 0 && h.world[i] >= 0 {
			unix.Close(int(p.Fd))
		}
	}
	h.pfds = nil
	if h.bye != nil {
		h.bye.close()
	}
}

// watchLauncher reads rivetrun -ft's failure notices ("failed rank=R
// status=S time=T" lines) and marks those ranks failed.
func watchLauncher(e *engine, f *os.File) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rank, status, at, ok := parseNotice(sc.Text())
		if !ok {
			continue
		}
		e.mu.Lock()
		if rank >= 0 && rank < len(e.failed) {
			e.markFailed(rank, procFailed("world rank %d %s at %s (the launcher saw it)", rank, exitText(status), at.UTC().Format(time.RFC3339Nano)))
		}
		e.mu.Unlock()
	}
}

// tellLauncher writes rivetrun -ft a "declared rank=R" line for each
// rank this process declares failed, until Close closes verdicts; then
// it closes done. A launcher that does not read within 100 ms, or is
// gone, is not waited for.
func tellLauncher(f *os.File, verdicts <-chan int, done chan<- struct{}) {
	defer close(done)
	for w := range verdicts {
		f.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		fmt.Fprintf(f, "declared rank=%d\n", w)
	}
}

func parseNotice(line string) (rank, status int, at time.Time, ok bool) {
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "failed" {
		return 0, 0, time.Time{}, false
	}
	vals := map[string]int64{}
	for _, kv := range f[1:] {
		k, v, found := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !found || err != nil {
			return 0, 0, time.Time{}, false
		}
		vals[k] = n
	}
	return int(vals["rank"]), int(vals["status"]), time.Unix(0, vals["time"]), true
}

func exitText(status int) string {
	if status > 128 {
		return fmt.Sprintf("was killed by signal %d", status-128)
	}
	return fmt.Sprintf("exited with status %d", status)
}

// watchVerbs turns the verbs device's async events into per-peer health:
// a queue pair's error fails that peer, a fatal device error every peer
// reached through it, and a port going down (or up) makes every verbs
// peer suspect (or not) — see Health.
func (ep *Endpoint) watchVerbs(events <-chan hw.Event) {
	e := ep.e
	for ev := range events {
		e.mu.Lock()
		v := ep.verbs
		if v == nil {
			e.mu.Unlock()
			continue
		}
		async, link := ep.opts.sources&SourceAsync != 0, ep.opts.sources&SourceLink != 0
		switch {
		case ev.Kind == hw.EventQPError && async:
			v.QPError(ev.QPN, fmt.Errorf("async event %v", ev))
		case ev.Kind == hw.EventDeviceFatal && async:
			v.DeviceFatal(fmt.Errorf("async event %v", ev))
		case ev.Kind == hw.EventPortDown && link:
			v.portDown = fmt.Errorf("%w: %s port %d is down (%v)", ErrNoRoute, v.Device().Name(), ev.Port, ev.State)
		case ev.Kind == hw.EventPortActive && link:
			v.portDown = nil
		}
		e.mu.Unlock()
	}
}

// Health reports what this process knows of world rank r: nil while
// nothing is wrong; the failure (or clean exit) once r is known to be
// gone, as Failed reports it; or, for a peer reached over verbs while the
// device's port is down, an error wrapping ErrNoRoute — a suspicion, not
// a failure: if the port comes back within the queue pair's failure
// bound, traffic resumes. This is the per-peer signal a failure detector
// consumes.
func (ep *Endpoint) Health(r int) error {
	if r < 0 || r >= ep.size {
		return fmt.Errorf("%w: world rank %d of %d", ErrRank, r, ep.size)
	}
	e := ep.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.failed[r]; err != nil {
		return err
	}
	if v := ep.verbs; v != nil && e.route[r] == v && v.portDown != nil {
		return v.portDown
	}
	return nil
}
