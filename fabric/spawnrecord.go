//go:build linux

package fabric

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// What the two sides of a spawn tell each other, and how each joins the
// other's processes.

// A record is what a process of one side of a spawn tells the other:
// where it is and how to reach it, and what any new communicator with it
// must avoid.
type record struct {
	world   int
	pid     int
	next    int    // the next world rank free as it knows
	node    string // its node key
	shm     string // its segment (FDPath), "" if none
	verbs   []byte // its verbs address, nil if none
	beat    string // its heartbeat thread (its "beat" key)
	ids     idMask // its free context ids
	lastGen uint64
}

// record is this process's.
func (ep *Endpoint) record() ([]byte, error) {
	var b bytes.Buffer
	le := binary.LittleEndian
	put := func(v uint64) { b.Write(le.AppendUint64(nil, v)) }
	putStr := func(s []byte) { put(uint64(len(s))); b.Write(s) }
	put(uint64(ep.rank))
	put(uint64(os.Getpid()))
	put(uint64(ep.nextWorld()))
	node := nodeKey()
	if ep.opts.node != "" {
		node = ep.opts.node
	}
	putStr([]byte(node))
	var shmPath, addr []byte
	if ep.shm != nil {
		shmPath = []byte(ep.shm.FDPath())
	}
	if ep.verbs != nil {
		addr = ep.verbs.Address()
	}
	putStr(shmPath)
	putStr(addr)
	putStr(ep.beatID())
	ep.idMu.Lock()
	ids := ep.ids
	ep.idMu.Unlock()
	for _, w := range ids {
		put(w)
	}
	put(ep.lastGen)
	// Fixed length: allgatherInternal trades equal lengths.
	if b.Len() > recordSize {
		return nil, fmt.Errorf("fabric: a spawn record of %d bytes (node key %q)", b.Len(), node)
	}
	out := make([]byte, recordSize)
	copy(out, b.Bytes())
	return out, nil
}

// recordSize is every record's length.
const recordSize = 2048

func parseRecord(b []byte) (*record, error) {
	if len(b) != recordSize {
		return nil, fmt.Errorf("%w: a spawn record of %d bytes", ErrInvalid, len(b))
	}
	le := binary.LittleEndian
	off := 0
	bad := false
	get := func() uint64 {
		if off+8 > len(b) {
			bad = true
			return 0
		}
		v := le.Uint64(b[off:])
		off += 8
		return v
	}
	getStr := func() []byte {
		n := int(get())
		if n < 0 || off+n > len(b) {
			bad = true
			return nil
		}
		s := b[off : off+n]
		off += n
		return s
	}
	r := &record{world: int(get()), pid: int(get()), next: int(get())}
	r.node = string(getStr())
	r.shm = string(getStr())
	if v := getStr(); len(v) > 0 {
		r.verbs = slices.Clone(v)
	}
	r.beat = string(getStr())
	for i := range r.ids {
		r.ids[i] = get()
	}
	r.lastGen = get()
	if bad {
		return nil, fmt.Errorf("%w: a malformed spawn record", ErrInvalid)
	}
	return r, nil
}

func parseRecords(b []byte) ([]*record, error) {
	if len(b) == 0 || len(b)%recordSize != 0 {
		return nil, fmt.Errorf("%w: spawn records of %d bytes", ErrInvalid, len(b))
	}
	var out []*record
	for off := 0; off < len(b); off += recordSize {
		r, err := parseRecord(b[off : off+recordSize])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// nextWorld is the next world rank free as this process knows: after its
// job's, and after every rank it has met since.
func (ep *Endpoint) nextWorld() int {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	n := ep.base + ep.jobSize
	for w, p := range ep.e.route {
		if p != nil {
			n = max(n, w+1)
		}
	}
	return n
}

// joinSpawned connects this process to the other side of a spawn and
// makes the intercommunicator: local are this side's world ranks (its
// records ours), remote the other side's records; first says this side
// (the spawners) comes first in the bridge. With createMu held.
func (ep *Endpoint) joinSpawned(local []int, ours, theirs []*record, first bool) (*Comm, error) {
	mine := nodeKey()
	if ep.opts.node != "" {
		mine = ep.opts.node
	}
	remote := make([]int, len(theirs))
	var and idMask
	for i := range and {
		and[i] = ^uint64(0)
	}
	gen := uint64(0)
	for _, r := range slices.Concat(ours, theirs) {
		for i := range and {
			and[i] &= r.ids[i]
		}
		gen = max(gen, r.lastGen)
	}
	e := ep.e
	e.mu.Lock()
	for i, r := range theirs {
		w := r.world
		remote[i] = w
		if w < 0 || w >= ep.size || w == ep.rank || slices.Contains(local, w) {
			e.mu.Unlock()
			return nil, fmt.Errorf("%w: a spawn's process names world rank %d (a universe of %d)", ErrRank, w, ep.size)
		}
		if e.route[w] != nil {
			continue // met already (an earlier spawn's, merged since)
		}
		if err := ep.reach(w, r, r.node == mine); err != nil {
			e.mu.Unlock()
			return nil, err
		}
	}
	e.all = nil // (joined anew)
	e.mu.Unlock()
	return ep.makeInter(local, remote, first, &and, gen)
}

// goneCause is why world rank w, found gone before this process could
// reach it, is no longer there: it closed if it said goodbye, else it
// failed. With e.mu held.
func (e *engine) goneCause(w int) error {
	if h := e.health; h != nil && h.bye != nil && w < len(h.bye.said) && h.bye.said[w] {
		return fmt.Errorf("%w: world rank %d closed its endpoint before this process reached it", ErrClosed, w)
	}
	return procFailed("world rank %d exited before this process reached it", w)
}

// reach connects to world rank w, which joined the universe after Init,
// as its record says: through its segment if it is on this node (and
// this process shares memory with its node), else over verbs; and
// watches its pid if it is on this node. With e.mu held.
func (ep *Endpoint) reach(w int, r *record, here bool) error {
	e := ep.e
	id := nodeID(r.node)
	if n, ok := ep.nodeKeys[id]; ok {
		ep.nodeOf[w] = n
	} else if ep.nodeOf != nil {
		ep.nodeKeys[id] = len(ep.nodeKeys)
		ep.nodeOf[w] = ep.nodeKeys[id]
	}
	switch {
	case here && ep.shm != nil && r.shm != "" && ep.opts.provider != "verbs":
		if err := ep.shm.Add(w, r.shm, r.pid); err != nil {
			if errors.Is(err, fs.ErrNotExist) || unix.Kill(r.pid, 0) == unix.ESRCH {
				// Its descriptors are gone (it exited, or is a zombie)
				// — the spawn returned at other members, and it
				// finished or failed — before this process reached it:
				// a peer that left, not an error of the spawn. Unless it
				// said goodbye, it failed: its death must reach the
				// agreements (a process told only "closed" left an
				// agreement waiting for its contribution for good —
				// examples/ftrespawn, the spawn root killed right after
				// the spawn).
				e.markFailedNow(w, e.goneCause(w))
				return nil
			}
			return err
		}
		e.route[w] = ep.shm
	case ep.verbs != nil && len(r.verbs) > 0:
		if err := ep.verbs.AddPeer(w, r.verbs); err != nil {
			return err
		}
		e.route[w] = ep.verbs
	default:
		return fmt.Errorf("fabric: world rank %d joined, but nothing reaches it (same node %v, its segment %q, its verbs address %d bytes, this process's verbs provider %v): %w",
			w, here, r.shm, len(r.verbs), ep.verbs != nil, ErrNoRoute)
	}
	if here {
		// The detector asks this node's kernel about a process here
		// before a verdict, rather than judge it by its reads.
		ep.addBeatID(w, r.pid, r.beat)
	}
	if here && ep.opts.sources&SourcePidfd != 0 {
		if e.health == nil {
			e.health = &health{}
		}
		e.health.watch(w, r.pid)
	}
	return nil
}

// watch adds process pid, world rank w, to those watched.
func (h *health) watch(w, pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err == unix.ESRCH {
		h.gone = append(h.gone, w) // exited already (see newHealth)
		return
	}
	if err != nil {
		return
	}
	unix.CloseOnExec(fd)
	h.pfds = append(h.pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	h.world = append(h.world, w)
}

func writeBlob(w io.Writer, b []byte) error {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// readBlob reads what writeBlob wrote; nil for an empty blob.
func readBlob(r io.Reader) ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size == 0 {
		return nil, nil
	}
	if size > 64<<20 {
		return nil, fmt.Errorf("%w: a blob of %d bytes", ErrInvalid, size)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}
