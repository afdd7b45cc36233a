//go:build linux

package vm

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// vswitch is the cluster's Ethernet switch: a unix datagram socket per
// node, each frame forwarded to the node whose MAC it is for, or to every
// node for broadcast and multicast — within the sender's side of a
// partition.
//
// Each port has a queue of portQueue frames, drained into its node's
// qemu as fast as qemu takes them: a socket of qemu's holds only
// net.unix.max_dgram_qlen (10) datagrams, and a guest busy elsewhere
// leaves it full for milliseconds — dropping there turned every burst
// into retransmissions (RoCE fabrics are lossless: a switch buffers and
// pauses rather than drop). A port whose node does not drain at all (a
// stopped qemu) loses frames once its queue is full, as a real switch's
// full buffer does; it never holds up the others.
type vswitch struct {
	dir   string
	ports []*net.UnixConn // frames from node i+1 arrive on ports[i]
	out   []chan frame    // frames for node i+1
	mu    sync.Mutex
	side  []int // by node index from 0: which side of a partition
	wg    sync.WaitGroup
	done  chan struct{}
	// dropped counts the frames a port could not take: its queue was
	// full, or its node's socket gone.
	dropped atomic.Uint64
}

// portQueue is how many frames a port holds for its node: a few
// milliseconds of what one node sends at full speed.
const portQueue = 4096

type frame struct {
	from int
	b    []byte
}

func newSwitch(dir string, nodes int) (*vswitch, error) {
	s := &vswitch{dir: dir, side: make([]int, nodes), done: make(chan struct{})}
	for i := 1; i <= nodes; i++ {
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.portPath(i), Net: "unixgram"})
		if err != nil {
			s.close()
			return nil, fmt.Errorf("the cluster's switch: %w", err)
		}
		s.ports = append(s.ports, c)
		s.out = append(s.out, make(chan frame, portQueue))
	}
	for i := range s.ports {
		s.wg.Add(2)
		go s.forward(i)
		go s.deliver(i)
	}
	return s, nil
}

// portPath is the switch's end of node i's link; nodePath is qemu's.
func (s *vswitch) portPath(i int) string { return filepath.Join(s.dir, "sw-"+strconv.Itoa(i)+".sock") }
func (s *vswitch) nodePath(i int) string {
	return filepath.Join(s.dir, "nic-"+strconv.Itoa(i)+".sock")
}

func (s *vswitch) close() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	for _, p := range s.ports {
		p.Close()
	}
	s.wg.Wait()
}

// forward queues each frame from node from+1 at the ports it is for.
func (s *vswitch) forward(from int) {
	defer s.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := s.ports[from].Read(buf)
		if err != nil {
			return
		}
		if n < 14 {
			continue
		}
		dst := buf[:6]
		for to := range s.ports {
			if to == from || !s.connected(from, to) {
				continue
			}
			if dst[0]&1 == 1 || bytes.Equal(dst, nodeMAC(to+1)) {
				select {
				case s.out[to] <- frame{from, append([]byte(nil), buf[:n]...)}:
				default:
					s.dropped.Add(1)
				}
			}
		}
	}
}

// deliver writes node to+1's queue into its qemu's socket, waiting while
// that socket is full: through a socket connected to it, which poll
// reports writable only once the peer has room.
func (s *vswitch) deliver(to int) {
	defer s.wg.Done()
	var conn *net.UnixConn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		var f frame
		select {
		case f = <-s.out[to]:
		case <-s.done:
			return
		}
		if conn == nil {
			// qemu binds its socket as it starts; frames before that
			// (and after it exits) have nowhere to go.
			c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: s.nodePath(to + 1), Net: "unixgram"})
			if err == nil {
				conn = c
			}
		}
		// A partition made after the frame was queued holds it too.
		if conn == nil || !s.connected(f.from, to) {
			s.dropped.Add(1)
		} else if err := s.write(conn, f.b); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.dropped.Add(1)
			conn.Close()
			conn = nil
		}
	}
}

// write writes b to conn, waiting while the peer's queue is full, until
// the switch closes (net.ErrClosed).
func (s *vswitch) write(conn *net.UnixConn, b []byte) error {
	for {
		conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := conn.Write(b)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		select {
		case <-s.done:
			return net.ErrClosed
		default:
		}
	}
}

func (s *vswitch) connected(a, b int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.side[a] == s.side[b]
}

// partition splits the nodes into sides, each a comma-separated list of
// nodes ("1,2" "3"); frames cross no side's border. Every node must be on
// one side.
func (s *vswitch) partition(sides []string) error {
	side := make([]int, len(s.ports))
	for i := range side {
		side[i] = -1
	}
	for k, group := range sides {
		for _, v := range strings.Split(group, ",") {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > len(side) || side[n-1] >= 0 {
				return fmt.Errorf("partition: %q is not a node of 1 to %d named once", v, len(side))
			}
			side[n-1] = k
		}
	}
	for i, k := range side {
		if k < 0 {
			return fmt.Errorf("partition: node %d is on no side", i+1)
		}
	}
	s.mu.Lock()
	s.side = side
	s.mu.Unlock()
	return nil
}

// heal joins every side again.
func (s *vswitch) heal() {
	s.mu.Lock()
	clear(s.side)
	s.mu.Unlock()
}
