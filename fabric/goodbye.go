//go:build linux

package fabric

import (
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// goodbyes tells a clean exit from a failure for the processes of this
// node that are reached over verbs (the verbs provider forced on one
// node, as soft-RoCE tests are). Their pidfds say that they exited, not
// how; over shared memory the segment's closed word says how, and over
// verbs a closing process writes a word at every peer it is connected to
// — but a peer it never talked to has no such word. So each such process
// binds a datagram socket named for its pid in the abstract namespace,
// and Close sends every process of the node its world rank there before
// the process exits: the datagram is queued at the receiver before the
// pidfd can fire, and a receiver reads its queue before it judges an
// exit. (A bounded queue: a closing process retries a full one for
// byeWait, then gives up — its peers then see a failure, as before.)
type goodbyes struct {
	fd   int
	said []bool // by world rank: it closed on purpose
}

// byeWait bounds how long Close retries a peer whose queue is full.
const byeWait = 50 * time.Millisecond

func byeAddr(pid int) *unix.SockaddrUnix {
	return &unix.SockaddrUnix{Name: fmt.Sprintf("@rivet-bye-%d", pid)}
}

// listenGoodbyes binds this process's socket, for a job of size ranks.
func listenGoodbyes(pid, size int) (*goodbyes, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fabric: goodbye socket: %w", err)
	}
	if err := unix.Bind(fd, byeAddr(pid)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fabric: goodbye socket: %w", err)
	}
	return &goodbyes{fd: fd, said: make([]bool, size)}, nil
}

// drain reads every goodbye queued so far.
func (g *goodbyes) drain() {
	var b [8]byte
	for {
		n, _, err := unix.Recvfrom(g.fd, b[:], unix.MSG_DONTWAIT)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if w := binary.LittleEndian.Uint64(b[:]); n == 8 && w < uint64(len(g.said)) {
			g.said[w] = true
		}
	}
}

func (g *goodbyes) close() {
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
}

// sayGoodbye tells the processes with these pids that world rank me is
// closing on purpose. A process with no socket (one not watching pidfds)
// is skipped.
func sayGoodbye(me int, pids []int) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(me))
	deadline := time.Now().Add(byeWait)
	for _, pid := range pids {
		for {
			err := unix.Sendto(fd, b[:], unix.MSG_DONTWAIT, byeAddr(pid))
			if err != unix.EAGAIN && err != unix.EINTR || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// saidGoodbye reports whether world rank w has closed on purpose, as far
// as this process can tell now: the goodbyes queued so far, or its
// provider's word that it closed (a segment's closed word, a verbs
// peer's goodbye write); with e.mu held.
func (e *engine) saidGoodbye(w int) bool {
	if h := e.health; h != nil && h.bye != nil {
		h.bye.drain()
		if w < len(h.bye.said) && h.bye.said[w] {
			return true
		}
	}
	p := e.route[w]
	return p != nil && !e.closed && p.closed(w)
}
