//go:build linux

package vm

import (
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// vswitch is the cluster's Ethernet switch: a unix datagram socket per
// node, each frame forwarded to the node whose MAC it is for, or to every
// node for broadcast and multicast — within the sender's side of a
// partition. A port whose node does not drain its socket (a stopped qemu)
// loses frames, as a real switch's full queue does; it never holds up the
// others.
type vswitch struct {
	dir   string
	ports []*net.UnixConn
	mu    sync.Mutex
	side  []int // by node index from 0: which side of a partition
	wg    sync.WaitGroup
}

func newSwitch(dir string, nodes int) (*vswitch, error) {
	s := &vswitch{dir: dir, side: make([]int, nodes)}
	for i := 1; i <= nodes; i++ {
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.portPath(i), Net: "unixgram"})
		if err != nil {
			s.close()
			return nil, fmt.Errorf("the cluster's switch: %w", err)
		}
		s.ports = append(s.ports, c)
	}
	for i := range s.ports {
		s.wg.Add(1)
		go s.forward(i)
	}
	return s, nil
}

// portPath is the switch's end of node i's link; nodePath is qemu's.
func (s *vswitch) portPath(i int) string { return filepath.Join(s.dir, "sw-"+strconv.Itoa(i)+".sock") }
func (s *vswitch) nodePath(i int) string {
	return filepath.Join(s.dir, "nic-"+strconv.Itoa(i)+".sock")
}

func (s *vswitch) close() {
	for _, p := range s.ports {
		p.Close()
	}
	s.wg.Wait()
}

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
		frame, dst := buf[:n], buf[:6]
		for to := range s.ports {
			if to == from || !s.connected(from, to) {
				continue
			}
			if dst[0]&1 == 1 || bytes.Equal(dst, nodeMAC(to+1)) {
				s.send(to, frame)
			}
		}
	}
}

// send gives a frame to node to's qemu without waiting: a full or absent
// socket drops it.
func (s *vswitch) send(to int, frame []byte) {
	rc, err := s.ports[to].SyscallConn()
	if err != nil {
		return
	}
	sa := &unix.SockaddrUnix{Name: s.nodePath(to + 1)}
	rc.Write(func(fd uintptr) bool {
		unix.Sendto(int(fd), frame, unix.MSG_DONTWAIT, sa)
		return true
	})
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
