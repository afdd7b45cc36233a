package fabric

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// health watches the processes on this node through pidfds: a pidfd
// becomes readable when its process exits, however it exits, so a
// SIGKILLed peer is noticed at the next scan (every millisecond while a
// call waits). A peer that set its segment's closed word exited on
// purpose; any other exit is a failure.
type health struct {
	pfds  []unix.PollFd
	world []int // world rank per pfd
}

func newHealth(local []int, pids []int, me int) *health {
	h := &health{}
	for i, w := range local {
		if w == me {
			continue
		}
		fd, err := unix.PidfdOpen(pids[i], 0)
		if err != nil {
			// No pidfd (old kernel, other pid namespace): this peer's
			// failure is learned from the launcher or its errors instead.
			continue
		}
		unix.CloseOnExec(fd)
		h.pfds = append(h.pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		h.world = append(h.world, w)
	}
	return h
}

func (h *health) check(e *engine) {
	if len(h.pfds) == 0 {
		return
	}
	n, err := unix.Poll(h.pfds, 0)
	if err != nil || n == 0 {
		return
	}
	// Failures first, then clean exits: a process that closed right after
	// a collective failed under it must not hide the failure behind its
	// own, unremarkable, exit.
	for pass := 0; pass < 2; pass++ {
		for i := range h.pfds {
			if h.pfds[i].Revents&unix.POLLIN == 0 || h.pfds[i].Fd < 0 {
				continue
			}
			w := h.world[i]
			closed := e.route[w] != nil && e.route[w].closed(w)
			if closed != (pass == 1) {
				continue
			}
			unix.Close(int(h.pfds[i].Fd))
			h.pfds[i].Fd = -1 // poll ignores negative fds
			if closed {
				e.markFailed(w, fmt.Errorf("%w: world rank %d closed its endpoint", ErrClosed, w))
			} else {
				e.markFailed(w, procFailed("world rank %d exited (seen through its pidfd)", w))
			}
		}
	}
}

func (h *health) close() {
	for _, p := range h.pfds {
		if p.Fd >= 0 {
			unix.Close(int(p.Fd))
		}
	}
	h.pfds = nil
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
			e.markFailed(rank, procFailed("world rank %d %s at %s (the launcher saw it)", rank, exitText(status), at.Format(time.RFC3339Nano)))
		}
		e.mu.Unlock()
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
